"""The ``nats`` topology: three ``nats-server -js`` in one cluster on 127.0.0.1, a JetStream stream of 3 replicas.

Each server has its own config (``server_name``, client port, route port = client + 1000,
``store_dir`` under ``.run/nats/``) and routes to the other two. Ready means JetStream has a meta
leader and the stream ``orders`` has a leader and two current replicas.

NATS 2.9 (Debian 12) fsyncs its JetStream files on a 2-minute interval and has no setting to
change it (``sync_interval`` came in 2.10): a publish is acknowledged once a quorum of the three
servers has it in memory/OS cache, not on disk. Every durability figure must say so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from labs.launcher import ports
from labs.launcher.broker_process import BrokerProcess, rss_bytes
from labs.launcher.errors import LauncherError

if TYPE_CHECKING:  # nats-py is imported where it is used: only the nats topology needs it
    from nats.js import JetStreamContext
    from nats.js.api import StreamConfig

PORTS_VAR = "LAB_NATS_PORTS"
DEFAULT_PORTS = (4230, 4231, 4232)
ROUTE_OFFSET = 1000
STREAM = "orders"
DUPLICATE_WINDOW_S = 120.0
START_TIMEOUT_S = 30.0
DEBIAN_BIN = Path("/usr/sbin/nats-server")


def binary() -> str:
    found = shutil.which("nats-server") or (str(DEBIAN_BIN) if DEBIAN_BIN.exists() else None)
    if found is None:
        raise LauncherError(
            "nats-server not found on PATH: run 'make brokers-bin' "
            "(apt-get install --no-install-recommends rabbitmq-server nats-server)"
        )
    return found


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

    @property
    def processes(self) -> list[BrokerProcess]:
        return list(self.servers)

    def server_name(self, port: int) -> str:
        return f"nats-{port}"

    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    def conf(self, port: int) -> Path:
        return self.home / f"nats-{port}.conf"

    def _write_configs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        for port in self.client_ports:
            routes = ", ".join(f'"nats-route://127.0.0.1:{self._route[p]}"' for p in self.client_ports if p != port)
            store = self.home / f"nats-{port}-data"
            self.conf(port).write_text(
                f'server_name: "{self.server_name(port)}"\n'
                f'listen: "127.0.0.1:{port}"\n'
                f'jetstream {{\n  store_dir: "{store}"\n  max_memory_store: 268435456\n'
                "  max_file_store: 4294967296\n}\n"
                f'cluster {{\n  name: "lab"\n  listen: "127.0.0.1:{self._route[port]}"\n  routes: [{routes}]\n}}\n'
            )

    def ensure(self, stream: str = STREAM, timeout_s: float = START_TIMEOUT_S) -> list[str]:
        """Start what is not running, wait for a JetStream meta leader and ``stream`` with 3 current replicas."""
        server = binary()
        self._write_configs()
        for proc in self.servers:
            if proc.pid() is None:
                proc.start([server, "-js", "-c", str(self.conf(proc.port))], PORTS_VAR,
                           lambda p=proc: ports.in_use(p.port), "client connections", timeout_s)  # type: ignore[misc]
        asyncio.run(wait_stream(self.urls(), stream, timeout_s))
        return self.urls()

    def stop(self) -> list[int]:
        return [pid for proc in self.servers if (pid := proc.kill(signal.SIGTERM)) is not None]

    def kill_server(self, port: int) -> int | None:
        return self._server(port).kill(signal.SIGKILL)

    def restart_server(self, port: int, timeout_s: float = START_TIMEOUT_S) -> None:
        proc = self._server(port)
        proc.start([binary(), "-js", "-c", str(self.conf(port))], PORTS_VAR, lambda: ports.in_use(port),
                   "client connections", timeout_s)

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
        info = asyncio.run(stream_cluster(self.urls(), stream))
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
    import nats

    deadline = time.monotonic() + timeout_s
    problem = "not checked"
    while time.monotonic() < deadline:
        try:
            nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=1)
            try:
                js = nc.jetstream(timeout=3)
                await js.account_info()
                await ensure_stream(js, stream)
                info = await js.stream_info(stream)
            finally:
                await nc.close()
            cluster = info.cluster
            replicas = cluster.replicas or [] if cluster else []
            if cluster and cluster.leader and len(replicas) == len(urls) - 1 and all(r.current for r in replicas):
                return {"leader": cluster.leader, "replicas": [(r.name, r.current) for r in replicas]}
            problem = f"stream {stream}: leader {cluster.leader if cluster else None}, replicas {replicas}"
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.3)
    raise LauncherError(f"JetStream stream {stream!r} not ready with 3 replicas in {timeout_s:.0f} s: {problem}")
