"""The native Redis topologies: ``single``, ``aof`` and ``sentinel``, started as real processes.

Everything a topology writes (configs, logs, pid files, data) lives under
``<run_dir>/<topology>/``, where ``run_dir`` is ``$LAB_RUN_DIR`` or ``.run`` at the
repository root. Ports come from :mod:`labs.launcher.ports`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from labs.launcher import binaries, ports
from labs.launcher.errors import LauncherError
from labs.launcher.process import POLL_S, RedisProcess, command

log = logging.getLogger(__name__)

TOPOLOGIES = ("single", "aof", "sentinel")
MASTER_NAME = "mymaster"
QUORUM = 2
DOWN_AFTER_VAR = "LAB_DOWN_AFTER_MS"
RUN_DIR_VAR = "LAB_RUN_DIR"
READY_TIMEOUT_S = 30.0
Address = tuple[str, int]


def default_run_dir() -> Path:
    """``$LAB_RUN_DIR``, else ``.run`` at the repository root."""
    env = os.environ.get(RUN_DIR_VAR)
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".run"


@dataclass(frozen=True)
class Addresses:
    """Where to reach a running topology."""

    topology: str
    url: str
    ports: tuple[int, ...]
    sentinels: tuple[Address, ...] = ()
    master_name: str | None = None


@dataclass(frozen=True)
class NodeStatus:
    name: str
    port: int
    pid: int | None
    role: str
    offset: int | None
    detail: str


@dataclass(frozen=True)
class SentinelStatus:
    name: str
    port: int
    pid: int | None
    master: Address | None


@dataclass(frozen=True)
class TopologyStatus:
    topology: str
    nodes: tuple[NodeStatus, ...]
    sentinels: tuple[SentinelStatus, ...]

    @property
    def running(self) -> bool:
        return any(n.pid for n in self.nodes) or any(s.pid for s in self.sentinels)


@dataclass(frozen=True)
class FailoverResult:
    old_master: Address
    new_master: Address
    elapsed_s: float
    hard: bool


@dataclass
class Topology:
    """One topology on fixed ports. Build it with :meth:`from_env` or :meth:`on_free_ports`."""

    name: str
    home: Path
    servers: list[RedisProcess]
    sentinels: list[RedisProcess] = field(default_factory=list)
    port_vars: dict[int, str] = field(default_factory=dict)
    down_after_ms: int = 1000
    extra_config: tuple[str, ...] = ()

    # -- construction -----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        name: str,
        run_dir: Path,
        *,
        server_ports: list[int],
        sentinel_ports: list[int] | None = None,
        port_vars: dict[int, str] | None = None,
        down_after_ms: int = 1000,
        extra_config: tuple[str, ...] = (),
    ) -> Topology:
        if name not in TOPOLOGIES:
            raise LauncherError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
        if down_after_ms < 100:
            raise LauncherError(f"down-after-milliseconds {down_after_ms} is too small (>= 100)")
        home = Path(run_dir).resolve() / name
        server_bin = binaries.require("redis-server")
        servers = [RedisProcess(f"redis-{p}", p, home, server_bin) for p in server_ports]
        sentinels: list[RedisProcess] = []
        if name == "sentinel":
            sentinel_bin = binaries.require("redis-sentinel")
            sentinels = [RedisProcess(f"sentinel-{p}", p, home, sentinel_bin) for p in sentinel_ports or []]
            if len(servers) < 2 or len(sentinels) < 3:
                raise LauncherError("the sentinel topology needs a master, a replica and three sentinels")
        return cls(name, home, servers, sentinels, dict(port_vars or {}), down_after_ms, extra_config)

    @classmethod
    def from_env(cls, name: str, run_dir: Path | None = None) -> Topology:
        """The topology on its documented ports (see :mod:`labs.launcher.ports`), env overrides applied."""
        run = run_dir or default_run_dir()
        down_after_ms = int(os.environ.get(DOWN_AFTER_VAR, "1000"))
        if name == "single":
            (port,) = ports.from_env(ports.SINGLE_PORT_VAR)[:1]
            return cls.create(name, run, server_ports=[port], port_vars={port: ports.SINGLE_PORT_VAR})
        if name == "aof":
            (port,) = ports.from_env(ports.AOF_PORT_VAR)[:1]
            return cls.create(name, run, server_ports=[port], port_vars={port: ports.AOF_PORT_VAR})
        master = ports.from_env(ports.MASTER_PORT_VAR)[0]
        replica = ports.from_env(ports.REPLICA_PORT_VAR)[0]
        watchers = ports.from_env(ports.SENTINEL_PORTS_VAR)
        port_vars = {master: ports.MASTER_PORT_VAR, replica: ports.REPLICA_PORT_VAR}
        port_vars |= {p: ports.SENTINEL_PORTS_VAR for p in watchers}
        return cls.create(
            name,
            run,
            server_ports=[master, replica],
            sentinel_ports=watchers,
            port_vars=port_vars,
            down_after_ms=down_after_ms,
        )

    @classmethod
    def on_free_ports(cls, name: str, run_dir: Path, *, down_after_ms: int = 1000) -> Topology:
        """The same topology on ports the kernel says are free (tests run beside a lab)."""
        n_servers, n_sentinels = (2, 3) if name == "sentinel" else (1, 0)
        picked = _distinct_free_ports(n_servers + n_sentinels)
        return cls.create(
            name,
            run_dir,
            server_ports=picked[:n_servers],
            sentinel_ports=picked[n_servers:],
            down_after_ms=down_after_ms,
        )

    # -- configs ----------------------------------------------------------------------

    @property
    def processes(self) -> list[RedisProcess]:
        return [*self.servers, *self.sentinels]

    def server(self, port: int) -> RedisProcess:
        for proc in self.servers:
            if proc.port == port:
                return proc
        raise LauncherError(f"port {port} is not a redis-server of the {self.name} topology")

    def _server_conf(self, proc: RedisProcess, replica_of: int | None) -> str:
        persist = self.name in ("aof", "sentinel")
        lines = [
            f"port {proc.port}",
            "bind 127.0.0.1",
            "daemonize no",
            f'dir "{proc.data_dir}"',
            'save ""',
            f"appendonly {'yes' if persist else 'no'}",
            "appendfsync everysec",
            # Start a replica's full sync at once (the default waits 5 s to batch replicas).
            "repl-diskless-sync-delay 0",
        ]
        if replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {replica_of}")
        return "\n".join([*lines, *self.extra_config]) + "\n"

    def _sentinel_conf(self, proc: RedisProcess) -> str:
        master = self.servers[0].port
        lines = [
            f"port {proc.port}",
            "bind 127.0.0.1",
            "daemonize no",
            f'dir "{proc.data_dir}"',
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master} {QUORUM}",
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
            f"sentinel failover-timeout {MASTER_NAME} 10000",
            f"sentinel parallel-syncs {MASTER_NAME} 1",
        ]
        return "\n".join(lines) + "\n"

    def _write_configs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        master = self.servers[0].port
        for i, proc in enumerate(self.servers):
            proc.conf.write_text(self._server_conf(proc, None if i == 0 else master))
        for proc in self.sentinels:
            proc.conf.write_text(self._sentinel_conf(proc))

    # -- lifecycle --------------------------------------------------------------------

    def ensure(self) -> Addresses:
        """Start what is not running (a running topology is reused) and wait until ready."""
        if not any(proc.pid() for proc in self.processes):
            self._write_configs()
        for proc in self.processes:
            if proc.pid() is None:
                self.start(proc)
        if self.sentinels:
            self.wait_ready()
        return self.addresses()

    def start(self, proc: RedisProcess) -> int:
        """Start one process of this topology; a busy port names the variable that moves it."""
        return proc.start(self.port_vars.get(proc.port, "the launcher's port settings"))

    def stop(self) -> list[int]:
        """Stop every process of this topology by pid (sentinels first); return their pids."""
        stopped = [pid for proc in [*self.sentinels, *self.servers] if (pid := proc.kill()) is not None]
        # Processes started on other ports (the env changed since 'up') still have pid files.
        for pidfile in sorted(self.home.glob("*.pid")) if self.home.exists() else []:
            orphan = RedisProcess(pidfile.stem, 0, self.home, "")
            if (pid := orphan.kill()) is not None:
                stopped.append(pid)
        return stopped

    def kill(self, port: int | None = None, sig: int = signal.SIGKILL) -> int | None:
        """Signal one redis-server (the current master by default) and wait until it is gone."""
        target = self.server(port if port is not None else self.master_addr()[1])
        return target.kill(sig)

    # -- addresses and status -----------------------------------------------------------

    def addresses(self) -> Addresses:
        host, port = self.master_addr()
        return Addresses(
            topology=self.name,
            url=f"redis://{host}:{port}/0",
            ports=tuple(p.port for p in self.processes),
            sentinels=tuple(("127.0.0.1", s.port) for s in self.sentinels),
            master_name=MASTER_NAME if self.sentinels else None,
        )

    @property
    def url(self) -> str:
        return self.addresses().url

    def sentinel_views(self) -> list[Address | None]:
        """The master address each sentinel reports (None where one does not answer)."""
        views: list[Address | None] = []
        for proc in self.sentinels:
            with contextlib.closing(proc.client()) as client:
                try:
                    reply = command(client, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                except redis.RedisError:
                    reply = None
            views.append((str(reply[0]), int(reply[1])) if reply else None)
        return views

    def master_addr(self) -> Address:
        """The master: what a quorum of sentinels reports, else the server whose role is master."""
        if self.sentinels:
            votes = Counter(v for v in self.sentinel_views() if v is not None)
            if votes:
                addr, count = votes.most_common(1)[0]
                if count >= QUORUM:
                    return addr
        for proc in self.servers:
            if _role(proc) == "master":
                return ("127.0.0.1", proc.port)
        return ("127.0.0.1", self.servers[0].port)

    def status(self) -> TopologyStatus:
        """Roles, replication offsets and each sentinel's view of the master."""
        nodes = tuple(_node_status(proc) for proc in self.servers)
        views = self.sentinel_views()
        sentinels = tuple(
            SentinelStatus(proc.name, proc.port, proc.pid(), view)
            for proc, view in zip(self.sentinels, views, strict=True)
        )
        return TopologyStatus(self.name, nodes, sentinels)

    # -- sentinel ---------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until every sentinel agrees on the master, sees the others, and replicas are linked."""
        deadline = time.monotonic() + timeout_s
        problem = "not checked yet"
        while time.monotonic() < deadline:
            problem = self._readiness_problem()
            if not problem:
                return
            time.sleep(0.1)
        raise LauncherError(f"the sentinel topology did not become ready in {timeout_s:.0f} s: {problem}")

    def _readiness_problem(self) -> str:
        views = self.sentinel_views()
        if None in views or len(set(views)) != 1:
            return f"sentinels disagree on the master: {views}"
        master = views[0]
        assert master is not None
        with contextlib.closing(self.server(master[1]).client()) as client:
            try:
                replication = client.info("replication")
            except redis.RedisError as exc:
                return f"master {master} does not answer: {exc}"
        expected = len([p for p in self.servers if p.pid()]) - 1
        online = sum(
            1
            for key, value in replication.items()
            if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
        )
        if online < expected:
            return f"master {master} has {online} of {expected} replicas synced (state=online)"
        for proc in self.sentinels:
            with contextlib.closing(proc.client()) as client:
                try:
                    state = command(client, "SENTINEL", "MASTER", MASTER_NAME)
                except redis.RedisError as exc:
                    return f"{proc.name} does not answer: {exc}"
            info = _pairs(state)
            if int(info.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                return f"{proc.name} knows {info.get('num-other-sentinels')} other sentinels"
            if int(info.get("num-slaves", 0)) < expected:
                return f"{proc.name} knows {info.get('num-slaves')} replicas"
        return ""

    def failover(self, *, hard: bool = False, timeout_s: float = 30.0, restart_old: bool = True) -> FailoverResult:
        """Fail over and return once a quorum of sentinels reports the new master.

        ``hard=False`` asks a sentinel for ``SENTINEL FAILOVER``; ``hard=True`` kills the
        master with SIGKILL. With ``restart_old`` the killed master is started again
        afterwards, and the sentinels turn it into a replica of the new master.
        """
        if not self.sentinels:
            raise LauncherError(f"the {self.name} topology has no sentinels; use 'sentinel'")
        old = self.master_addr()
        started = time.monotonic()
        if hard:
            self.server(old[1]).kill(signal.SIGKILL)
        else:
            self._ask_failover(started + timeout_s)
        new = self.wait_new_master(old, started + timeout_s)
        elapsed_s = time.monotonic() - started
        if hard and restart_old:
            # Restart only once every sentinel has switched: a sentinel still mid-failover
            # that sees the old master answer again would demote the promoted replica.
            self.wait_switched(new, started + timeout_s)
            self.start(self.server(old[1]))
            self.wait_ready(timeout_s)
        return FailoverResult(old, new, elapsed_s, hard)

    def _ask_failover(self, deadline: float) -> None:
        last = ""
        while time.monotonic() < deadline:
            for proc in self.sentinels:
                with contextlib.closing(proc.client()) as client:
                    try:
                        command(client, "SENTINEL", "FAILOVER", MASTER_NAME)
                        return
                    except redis.RedisError as exc:
                        last = f"{proc.name}: {exc}"
            time.sleep(0.2)
        raise LauncherError(f"no sentinel accepted SENTINEL FAILOVER: {last}")

    def wait_switched(self, new: Address, deadline: float) -> None:
        """Poll until every sentinel has switched to ``new``, finished, and pinged it."""
        while time.monotonic() < deadline:
            if all(_switched(proc, new) for proc in self.sentinels):
                return
            time.sleep(POLL_S)
        raise LauncherError(f"the sentinels did not all switch to {new[0]}:{new[1]} in time")

    def wait_new_master(self, old: Address, deadline: float) -> Address:
        """Poll until a quorum of sentinels reports a master other than ``old`` (``time.monotonic`` deadline)."""
        views: list[Address | None] = []
        while time.monotonic() < deadline:
            views = self.sentinel_views()
            votes = Counter(v for v in views if v is not None and v != old)
            if votes:
                addr, count = votes.most_common(1)[0]
                if count >= QUORUM and _role(self.server(addr[1])) == "master":
                    return addr
            time.sleep(POLL_S)
        raise LauncherError(f"no new master reported by a quorum of sentinels in time; they report {views}")


def _switched(proc: RedisProcess, new: Address) -> bool:
    with contextlib.closing(proc.client()) as client:
        try:
            info = _pairs(command(client, "SENTINEL", "MASTER", MASTER_NAME))
        except redis.RedisError:
            return False
    # Switched, done, and with a fresh PING reply from the new master: a sentinel whose link
    # to the new master is not up yet may still mark it down and fail over once more.
    return (
        (info.get("ip"), info.get("port")) == (new[0], str(new[1]))
        and info.get("flags") == "master"
        and info.get("role-reported") == "master"
        and int(info.get("last-ok-ping-reply", "999999")) < 500
    )


def _distinct_free_ports(n: int) -> list[int]:
    picked: list[int] = []
    while len(picked) < n:
        port = ports.free_port()
        if port not in picked:
            picked.append(port)
    return picked


def _pairs(reply: object) -> dict[str, str]:
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = list(reply) if isinstance(reply, list | tuple) else []
    return {str(k): str(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def _role(proc: RedisProcess) -> str:
    with contextlib.closing(proc.client()) as client:
        try:
            return str(client.info("replication").get("role", "?"))
        except redis.RedisError:
            return "down"


def _node_status(proc: RedisProcess) -> NodeStatus:
    pid = proc.pid()
    with contextlib.closing(proc.client()) as client:
        try:
            info = client.info("replication")
        except redis.RedisError:
            return NodeStatus(proc.name, proc.port, pid, "down", None, "")
    role = str(info.get("role", "?"))
    if role == "master":
        offset = info.get("master_repl_offset")
        detail = f"{info.get('connected_slaves', 0)} replica(s) linked"
    else:
        offset = info.get("slave_repl_offset")
        detail = f"of {info.get('master_host')}:{info.get('master_port')}, link {info.get('master_link_status')}"
    return NodeStatus(proc.name, proc.port, pid, role, int(offset) if offset is not None else None, detail)


def iter_topologies(run_dir: Path | None = None) -> Iterator[Topology]:
    """Every topology on its configured ports (for ``down`` and ``status`` without a name)."""
    for name in TOPOLOGIES:
        yield Topology.from_env(name, run_dir)
