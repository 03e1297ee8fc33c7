"""Default ports of the native topologies, their environment overrides, and port probes.

The defaults stay away from 6379 so that a student's own Redis is never touched.

| topology | role | default | variable |
|---|---|---|---|
| single | redis-server | 6390 | ``LAB_SINGLE_PORT`` |
| aof | redis-server | 6391 | ``LAB_AOF_PORT`` |
| sentinel | master, replica | 6392, 6393 | ``LAB_SENTINEL_MASTER_PORT``, ``LAB_SENTINEL_REPLICA_PORT`` |
| sentinel | three sentinels | 26390-26392 | ``LAB_SENTINEL_PORTS`` (comma-separated) |
| cluster | 3 masters + 3 replicas | 6400-6405 (bus ports +10000) | ``LAB_CLUSTER_PORTS`` (comma-separated) |
| monitoring | Prometheus | 9390 | ``LAB_PROMETHEUS_PORT`` |
| monitoring | one exporter per node | 9391+ | ``LAB_EXPORTER_PORTS`` (the first port, or comma-separated) |
"""

from __future__ import annotations

import collections
import os
import random
import socket
from pathlib import Path

from labs.launcher.errors import LauncherError

SINGLE_PORT_VAR = "LAB_SINGLE_PORT"
AOF_PORT_VAR = "LAB_AOF_PORT"
MASTER_PORT_VAR = "LAB_SENTINEL_MASTER_PORT"
REPLICA_PORT_VAR = "LAB_SENTINEL_REPLICA_PORT"
SENTINEL_PORTS_VAR = "LAB_SENTINEL_PORTS"
CLUSTER_PORTS_VAR = "LAB_CLUSTER_PORTS"
# A cluster node also listens on its cluster bus port, always its port + 10000.
CLUSTER_BUS_OFFSET = 10000
PROMETHEUS_PORT_VAR = "LAB_PROMETHEUS_PORT"
EXPORTER_PORTS_VAR = "LAB_EXPORTER_PORTS"

DEFAULTS: dict[str, str] = {
    SINGLE_PORT_VAR: "6390",
    AOF_PORT_VAR: "6391",
    MASTER_PORT_VAR: "6392",
    REPLICA_PORT_VAR: "6393",
    SENTINEL_PORTS_VAR: "26390,26391,26392",
    CLUSTER_PORTS_VAR: "6400,6401,6402,6403,6404,6405",
    PROMETHEUS_PORT_VAR: "9390",
    EXPORTER_PORTS_VAR: "9391",
}


def from_env(var: str) -> list[int]:
    """Read one port (or a comma-separated list) from ``var``, else its default."""
    raw = os.environ.get(var) or DEFAULTS[var]
    try:
        ports = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise LauncherError(f"{var}={raw!r} is not a port number (or a comma-separated list)") from None
    if not ports or any(not 0 < p < 65536 for p in ports):
        raise LauncherError(f"{var}={raw!r} is not a valid port")
    return ports


def free_port() -> int:
    """A port nobody has bound, for a server started next (tests and notebooks that run beside a lab).

    Picked below the kernel's ephemeral range (:func:`session_port_window`), not by ``bind(0)``:
    a port the kernel hands out is in that range, and any client socket may take the same number
    before the server binds it (a split-brain run in notebook 03 once met "port 34495 is in use")."""
    return free_ports(1, session_port_window())[0]


def in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
CLUSTER_WINDOW_WIDTH = 6000


WINDOW_VARS = ("LAB_CLUSTER_PORT_WINDOW", "LAB_SESSION_PORT_WINDOW")  # "START-STOP": a share set by the tests
# A quarter of each window is kept for runs outside a test session (no share in the environment);
# the test session splits the rest between its workers (tests/port_support.py).
OUTSIDE_SHARE = 4


def _window_from_env(var: str) -> range | None:
    """The share of a window the test session gave this process (each xdist worker its own), if any:
    then a grading sandbox or a notebook that picks ports never takes another worker's reserved one."""
    raw = os.environ.get(var, "")
    start, _, stop = raw.partition("-")
    if not (start.isdigit() and stop.isdigit() and int(start) < int(stop)):
        return None
    return range(int(start), int(stop))


def cluster_port_window() -> range:
    """Ports whose bus ports (+10000) both lie below the kernel's ephemeral range.

    The kernel hands out ephemeral ports to every outgoing connection and to ``bind(0)``: a
    bus port picked inside that range can be taken by any client socket between the pick and
    the node's start. Below it, only an explicit bind takes a port. ``$LAB_CLUSTER_PORT_WINDOW``
    narrows it to a test worker's share; without it, a run outside the tests picks in the window's
    top quarter (:func:`_outside_part`), which no worker's share overlaps.
    """
    if (share := _window_from_env(WINDOW_VARS[0])) is not None:
        return share
    return _outside_part(_whole_cluster_window())


def suite_cluster_window() -> range:
    """The part of the cluster window a test session splits between its workers (or its own share,
    in a session started inside one): never :func:`outside_part` of it, where runs outside the
    tests pick."""
    if (share := _window_from_env(WINDOW_VARS[0])) is not None:
        return share
    return _suite_part(_whole_cluster_window())


def _whole_cluster_window() -> range:
    try:
        low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    top = low - CLUSTER_BUS_OFFSET
    return range(max(1024, top - CLUSTER_WINDOW_WIDTH), top)


def free_cluster_ports(n: int, window: range | None = None) -> list[int]:
    """``n`` distinct free ports whose cluster bus ports (+10000) are free as well, picked at
    random in ``window`` (default :func:`cluster_port_window`), so that node and bus ports stay
    out of the ephemeral range; callers running side by side can pass disjoint windows."""
    window = window if window is not None else cluster_port_window()
    picked: list[int] = []
    for port in random.sample(window, len(window)):
        bus = port + CLUSTER_BUS_OFFSET
        if bus < 65536 and not {port, bus} & {*picked, *(p + CLUSTER_BUS_OFFSET for p in picked)} \
                and _bindable(port) and _bindable(bus):
            picked.append(port)
            if len(picked) == n:
                return picked
    raise LauncherError(f"no {n} free cluster ports with free bus ports in {window.start}-{window.stop - 1}")


SESSION_WINDOW_WIDTH = 4000
RECENT_PICKS = 256
_recent: collections.deque[int] = collections.deque(maxlen=RECENT_PICKS)  # this process's last picks


def session_port_window() -> range:
    """Ports for servers a run starts itself (topologies, monitoring, brokers): just below the
    cluster window, so below the ephemeral range too; ``$LAB_SESSION_PORT_WINDOW`` (a test
    worker's share) if set, else the window's top quarter, kept for runs outside the tests.

    A port picked with ``bind(0)`` and started minutes later (a notebook's topology) is free
    only at the pick: the kernel may hand the same number to another process's ``bind(0)`` or
    to a client socket meanwhile (a sentinel replica's port was once taken so by the other test
    worker). Below the ephemeral range only an explicit bind takes a port.
    """
    if (share := _window_from_env(WINDOW_VARS[1])) is not None:
        return share
    return _outside_part(_whole_session_window())


def suite_session_window() -> range:
    """The part of the session window a test session splits between its workers (see
    :func:`suite_cluster_window`)."""
    if (share := _window_from_env(WINDOW_VARS[1])) is not None:
        return share
    return _suite_part(_whole_session_window())


def _whole_session_window() -> range:
    cluster = _whole_cluster_window()
    return range(max(1024, cluster.start - SESSION_WINDOW_WIDTH), cluster.start)


def _suite_part(window: range) -> range:
    return range(window.start, window.stop - len(window) // OUTSIDE_SHARE)


def _outside_part(window: range) -> range:
    """The top of ``window``, for runs outside the tests (no share in the environment): a ``make
    compare`` or a grading run beside a test session never takes a port a worker reserved
    (an exporter port of notebook 10's setup was taken so)."""
    return range(window.stop - len(window) // OUTSIDE_SHARE, window.stop)


def free_ports(n: int, window: range) -> list[int]:
    """``n`` distinct ports nobody has bound, picked at random in ``window``; none of the last
    :data:`RECENT_PICKS` this process picked, which may not be bound yet (a topology's ports are
    picked before its first server starts)."""
    picked: list[int] = []
    for port in random.sample(window, len(window)):
        if port not in _recent and _bindable(port):
            picked.append(port)
            if len(picked) == n:
                _recent.extend(picked)
                return picked
    raise LauncherError(f"no {n} free ports in {window.start}-{window.stop - 1}")


EXPORTER_SLOTS = 16  # one exporter port per node of every topology (single, aof, sentinel, cluster: 13)
_SINGLE_VARS = (SINGLE_PORT_VAR, AOF_PORT_VAR, MASTER_PORT_VAR, REPLICA_PORT_VAR, PROMETHEUS_PORT_VAR)


def port_set() -> dict[str, str]:
    """Every ``LAB_*_PORT(S)`` variable of :data:`DEFAULTS` on free ports of this process's windows
    (:func:`session_port_window`, :func:`cluster_port_window`): the environment for a run's own
    topologies and monitoring beside others (a test worker's session, a grading job without the
    sandbox's network namespace). Cluster nodes get free bus ports (+10000) as well."""
    picked = free_ports(len(_SINGLE_VARS) + 3 + EXPORTER_SLOTS, session_port_window())
    env = dict(zip(_SINGLE_VARS, map(str, picked), strict=False))
    env[SENTINEL_PORTS_VAR] = ",".join(map(str, picked[len(_SINGLE_VARS):len(_SINGLE_VARS) + 3]))
    env[EXPORTER_PORTS_VAR] = ",".join(map(str, picked[len(_SINGLE_VARS) + 3:]))
    env[CLUSTER_PORTS_VAR] = ",".join(map(str, free_cluster_ports(6)))
    return env


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
