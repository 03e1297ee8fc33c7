"""The native Redis topologies ``single``, ``aof`` and ``sentinel`` (:class:`SentinelTopology`).

``cluster`` is :mod:`labs.launcher.cluster`'s, built on :class:`Topology`; build any of them by
name with :mod:`labs.launcher.topologies` (the factory, typed per name).

Everything a topology writes (configs, logs, pid files, data) lives under
``<run_dir>/<topology>/``, where ``run_dir`` is ``$LAB_RUN_DIR`` or ``.run`` at the
repository root. Ports come from :mod:`labs.launcher.ports`, the config files from
:mod:`labs.launcher.configs`, and what the sentinels say from :mod:`labs.launcher.sentinel`.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from labs.launcher import binaries, netns, ports, sentinel
from labs.launcher.configs import sentinel_conf, server_conf
from labs.launcher.errors import LauncherError
from labs.launcher.process import POLL_S, RedisProcess
from labs.launcher.sentinel import MASTER_NAME, QUORUM, Address
from labs.launcher.status import SentinelStatus, TopologyStatus, node_status, server_label
from labs.polling import seconds_left, wait_until

__all__ = [
    "MASTER_NAME", "QUORUM", "Address", "Addresses", "FailoverResult", "SentinelTopology", "Topology", "TopologyStatus",
]

TOPOLOGIES = ("single", "aof", "sentinel", "cluster")
DOWN_AFTER_VAR = "LAB_DOWN_AFTER_MS"
RUN_DIR_VAR = "LAB_RUN_DIR"
READY_TIMEOUT_S = 30.0


def default_run_dir() -> Path:
    """``$LAB_RUN_DIR``, else ``.run`` at the repository root."""
    env = os.environ.get(RUN_DIR_VAR)
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".run"


@dataclass(frozen=True)
class Addresses:
    """Where to reach a running topology."""

    topology: str
    url: str
    ports: tuple[int, ...]
    sentinels: tuple[Address, ...] = ()
    master_name: str | None = None


@dataclass(frozen=True)
class FailoverResult:
    old_master: Address
    new_master: Address
    elapsed_s: float
    hard: bool


@dataclass
class Topology:
    """One topology on fixed ports. Build it with :mod:`labs.launcher.topologies` (``create``,
    ``from_env``, ``on_free_ports``), the one factory, which knows every kind, the cluster too.

    The classmethods below are that factory's builders for the kinds this module knows; calling them
    directly is deprecated (tests/test_topology.py lists the files that still do).
    """

    name: str
    home: Path
    servers: list[RedisProcess]
    sentinels: list[RedisProcess] = field(default_factory=list)
    port_vars: dict[int, str] = field(default_factory=dict)
    down_after_ms: int = 1000
    extra_config: tuple[str, ...] = ()
    fabric: netns.Fabric | None = None  # --netns: each process in a network namespace of its own

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
        netns: bool = False,
    ) -> Topology:
        if name not in TOPOLOGIES:
            raise LauncherError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
        if name == "cluster":
            raise LauncherError("the cluster topology is built by labs.launcher.topologies.create('cluster', ...)")
        if netns and name != "sentinel":
            raise LauncherError(f"--netns is for the sentinel and cluster topologies, not {name!r}")
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
        kind = SentinelTopology if name == "sentinel" else Topology
        topo = kind(name, home, servers, sentinels, dict(port_vars or {}), down_after_ms, extra_config)
        return topo.in_namespaces() if netns else topo

    def in_namespaces(self) -> Topology:
        """The same topology with each process in a network namespace of its own (planned, not created)."""
        netns.require()
        self.fabric = netns.Fabric.plan(self.home, [proc.name for proc in self.processes])
        fabric = self.fabric
        self.servers = [replace(p, netns=fabric.member(p.name).ns, host=fabric.ip(p.name)) for p in self.servers]
        self.sentinels = [replace(p, netns=fabric.member(p.name).ns, host=fabric.ip(p.name)) for p in self.sentinels]
        return self

    @classmethod
    def from_env(cls, name: str, run_dir: Path | None = None, *, netns: bool = False) -> Topology:
        """The topology on its documented ports (see :mod:`labs.launcher.ports`), env overrides applied.

        ``netns`` puts each process in a network namespace; a topology started that way is found so again.
        """
        run = run_dir or default_run_dir()
        netns = netns or (Path(run).resolve() / name / "netns.json").exists()
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
            netns=netns,
        )

    @classmethod
    def on_free_ports(
        cls, name: str, run_dir: Path, *, down_after_ms: int = 1000, netns: bool = False,
        extra_config: tuple[str, ...] = (),
    ) -> Topology:
        """The same topology on ports the kernel says are free (tests run beside a lab)."""
        n_servers, n_sentinels = (2, 3) if name == "sentinel" else (1, 0)
        picked = _distinct_free_ports(n_servers + n_sentinels)
        return cls.create(
            name,
            run_dir,
            server_ports=picked[:n_servers],
            sentinel_ports=picked[n_servers:],
            down_after_ms=down_after_ms,
            netns=netns,
            extra_config=extra_config,
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

    def _write_configs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        master, host = self.servers[0].port, self.servers[0].host
        for i, proc in enumerate(self.servers):
            replica_of = None if i == 0 else master
            proc.conf.write_text(server_conf(self.name, proc, replica_of, self.extra_config, master_host=host))
        for proc in self.sentinels:
            proc.conf.write_text(sentinel_conf(proc, master, self.down_after_ms, master_host=host))

    # -- lifecycle --------------------------------------------------------------------

    def ensure(self) -> Addresses:
        """Start what is not running (a running topology is reused) and wait until ready."""
        if self.fabric is not None:
            self.fabric.up()
        if not any(proc.pid() for proc in self.processes):
            self._write_configs()
        for proc in self.processes:
            if proc.pid() is None:
                self.start(proc)
        self._when_started()
        return self.addresses()

    def _when_started(self) -> None:
        """What :meth:`ensure` waits for once every process answers PING (nothing more here)."""

    def start(self, proc: RedisProcess) -> int:
        """Start one process of this topology; a busy port names the variable that moves it."""
        return proc.start(self.port_vars.get(proc.port, "the launcher's port settings"))

    def stop(self) -> list[int]:
        """Stop every process of this topology by pid (sentinels first); return their pids."""
        # One process that will not stop must not keep the others running: every one is tried, the
        # namespaces go last whatever happened, and the first failure is raised after that.
        stopped: list[int] = []
        problems: list[LauncherError] = []
        orphans = [RedisProcess(pidfile.stem, 0, self.home, "") for pidfile in sorted(self.home.glob("*.pid"))
                   ] if self.home.exists() else []  # started on other ports (the env changed since 'up')
        try:
            for proc in [*self.sentinels, *self.servers, *orphans]:
                try:
                    if (pid := proc.kill()) is not None:
                        stopped.append(pid)
                except LauncherError as exc:
                    problems.append(exc)
        finally:
            if self.fabric is not None:
                self.fabric.destroy()  # the namespaces, their veths and rules (and anything left running in them)
        if problems:
            raise problems[0]
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
            sentinels=tuple((s.host, s.port) for s in self.sentinels),
            master_name=MASTER_NAME if self.sentinels else None,
        )

    @property
    def url(self) -> str:
        return self.addresses().url

    def sentinel_views(self) -> list[Address | None]:
        """The master address each sentinel reports (None where one does not answer)."""
        return sentinel.sentinel_views(self.sentinels)

    def master_addr(self) -> Address:
        """The master: what a quorum of sentinels reports, else the server whose role is master."""
        if self.sentinels and (addr := sentinel.quorum_master(self.sentinels)) is not None:
            return addr
        for proc in self.servers:
            if sentinel.role(proc) == "master":
                return (proc.host, proc.port)
        return (self.servers[0].host, self.servers[0].port)

    def status(self) -> TopologyStatus:
        """Roles, replication offsets and each sentinel's view of the master."""
        nodes = tuple(node_status(proc) for proc in self.servers)
        views = self.sentinel_views()
        sentinels = tuple(
            SentinelStatus(proc.name, proc.port, proc.pid(), view, server_label(proc))
            for proc, view in zip(self.sentinels, views, strict=True)
        )
        return TopologyStatus(self.name, nodes, sentinels)


class SentinelTopology(Topology):
    """A master, a replica and three sentinels: ready once the sentinels agree and see each other."""

    def _when_started(self) -> None:
        self.wait_ready()

    # -- sentinel ---------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, *, replica_views: bool = False) -> None:
        """Wait until every sentinel agrees on the master, sees the others, and replicas are linked.

        With ``replica_views`` also until each sentinel's last ``INFO`` of each replica shows it
        linked to that master: up to 10 s more after a replica rejoined (Sentinel's INFO period),
        paid only before a measurement that a stale view would disturb (see
        :func:`~labs.launcher.sentinel.sentinel_problem`).
        """
        problem = "not checked yet"

        def ready() -> bool:
            nonlocal problem
            problem = self._readiness_problem(replica_views)
            return not problem

        wait_until(ready, timeout_s, lambda: f"the sentinel topology to become ready: {problem}", 0.1,
                   error=LauncherError)

    def _readiness_problem(self, replica_views: bool = False) -> str:
        views = self.sentinel_views()
        if None in views or len(set(views)) != 1:
            return f"sentinels disagree on the master: {views}"
        master = views[0]
        assert master is not None
        expected = len([p for p in self.servers if p.pid()]) - 1
        online = sentinel.replicas_online(self.server(master[1]))
        if isinstance(online, str):
            return online
        if online < expected:
            return f"master {master} has {online} of {expected} replicas synced (state=online)"
        for proc in self.sentinels:
            if problem := sentinel.sentinel_problem(proc, len(self.sentinels), expected,
                                                    master if replica_views else None):
                return problem
        return ""

    def failover(self, *, hard: bool = False, timeout_s: float = 30.0, restart_old: bool = True) -> FailoverResult:
        """Fail over and return once a quorum of sentinels reports the new master.

        ``hard=False`` asks a sentinel for ``SENTINEL FAILOVER``; ``hard=True`` kills the
        master with SIGKILL. With ``restart_old`` the killed master is started again
        afterwards, and the sentinels turn it into a replica of the new master.
        """
        old = self.master_addr()
        started = time.monotonic()
        if hard:
            self.server(old[1]).kill(signal.SIGKILL)
        else:
            sentinel.ask_failover(self.sentinels, started + timeout_s)
        new = self.wait_new_master(old, started + timeout_s)
        elapsed_s = time.monotonic() - started
        if hard and restart_old:
            # Restart only once every sentinel has switched: a sentinel still mid-failover
            # that sees the old master answer again would demote the promoted replica.
            # the master they agree on: a second failover may have followed the first
            new = sentinel.wait_all_switched(self.sentinels, old, started + timeout_s)
            self.start(self.server(old[1]))
            self.wait_ready(timeout_s)
        return FailoverResult(old, new, elapsed_s, hard)

    def wait_switched(self, away_from: Address, deadline: float) -> Address:
        """Poll until every sentinel names one master other than ``away_from``, has finished, and has
        pinged it; return that master (after a second failover, not the one first promoted)."""
        return sentinel.wait_all_switched(self.sentinels, away_from, deadline)

    def wait_new_master(self, old: Address, deadline: float) -> Address:
        """Poll until a quorum of sentinels reports a master other than ``old`` (``time.monotonic`` deadline)."""

        def promoted() -> Address | None:
            addr = sentinel.quorum_master(self.sentinels, besides=old)
            return addr if addr is not None and sentinel.role(self.server(addr[1])) == "master" else None

        return wait_until(promoted, seconds_left(deadline), lambda: "a new master reported by a quorum of "
                          f"sentinels; they report {self.sentinel_views()}", POLL_S, error=LauncherError)


def _distinct_free_ports(n: int) -> list[int]:
    """``n`` distinct free ports below the ephemeral range (see :func:`labs.launcher.ports.free_port`)."""
    return ports.free_ports(n, ports.session_port_window())
