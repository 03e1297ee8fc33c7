"""The ``cluster`` topology: 3 masters + 3 replicas, each a plain ``redis-server`` with ``cluster-enabled yes``.

Ports 6400-6405 by default (``LAB_CLUSTER_PORTS``), each with its cluster bus on port + 10000;
``cluster-node-timeout`` 1000 ms (``LAB_CLUSTER_NODE_TIMEOUT_MS``); AOF everysec as in
``sentinel``; ``cluster-require-full-coverage no`` (see :func:`labs.launcher.configs.cluster_lines`).
The cluster is formed once with ``redis-cli --cluster create ... --cluster-replicas 1
--cluster-yes``, which returns before the cluster is usable, so :meth:`ClusterTopology.ensure`
waits until every node reports ``cluster_state:ok`` with all 16384 slots served and every
replica's link to its master is up. Each node keeps its cluster state in ``nodes.conf`` in its
data directory, so ``make down`` then ``make up-cluster`` brings the same cluster back.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from labs.launcher import binaries, ports
from labs.launcher.cluster_state import (
    ClusterNode,
    SlotRange,
    any_view,
    cluster_info,
    masters,
    nodes_view,
    owner,
    parse_nodes,
    readiness_problem,
    replicas_of,
    status_rows,
)
from labs.launcher.configs import cluster_lines, server_conf
from labs.launcher.errors import LauncherError
from labs.launcher.process import POLL_S, RedisProcess, command, log_tail
from labs.launcher.sentinel import Address
from labs.launcher.status import TopologyStatus
from labs.launcher.topology import READY_TIMEOUT_S, Addresses, FailoverResult, Topology
from labs.polling import seconds_left, wait_until

log = logging.getLogger(__name__)

NODE_TIMEOUT_VAR = "LAB_CLUSTER_NODE_TIMEOUT_MS"
DEFAULT_NODE_TIMEOUT_MS = 1000
N_NODES = 6  # 3 masters, each with 1 replica
FORM_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ClusterFailoverResult(FailoverResult):
    """A timed cluster failover: ``elapsed_s`` ends when every live node names the new master."""

    slots: tuple[SlotRange, ...] = ()  # the slots that changed master
    ready_s: float | None = None  # from the start until the whole cluster is ready again (None: old master left down)


@dataclass
class ClusterTopology(Topology):
    """Six cluster nodes under ``<run_dir>/cluster/``; build it through :class:`Topology` (``from_env`` ...)."""

    node_timeout_ms: int = DEFAULT_NODE_TIMEOUT_MS

    @classmethod
    def build(
        cls,
        run_dir: Path,
        server_ports: list[int],
        *,
        port_vars: dict[int, str] | None = None,
        extra_config: tuple[str, ...] = (),
    ) -> ClusterTopology:
        """Check the ports (six, with valid bus ports) and the node timeout; nothing starts yet."""
        if len(server_ports) != N_NODES or len(set(server_ports)) != N_NODES:
            raise LauncherError(f"the cluster topology needs {N_NODES} distinct ports, got {server_ports}")
        if too_high := [p for p in server_ports if p + ports.CLUSTER_BUS_OFFSET > 65535]:
            raise LauncherError(
                f"ports {too_high} have no valid cluster bus port (port + {ports.CLUSTER_BUS_OFFSET} > 65535); "
                f"set {ports.CLUSTER_PORTS_VAR} to ports below 55536"
            )
        raw = os.environ.get(NODE_TIMEOUT_VAR) or str(DEFAULT_NODE_TIMEOUT_MS)
        if not raw.isdigit() or int(raw) < 100:
            raise LauncherError(f"{NODE_TIMEOUT_VAR}={raw!r}: cluster-node-timeout must be a number of ms >= 100")
        home = Path(run_dir).resolve() / "cluster"
        server_bin = binaries.require("redis-server")
        servers = [RedisProcess(f"redis-{p}", p, home, server_bin) for p in server_ports]
        vars_ = dict(port_vars or dict.fromkeys(server_ports, ports.CLUSTER_PORTS_VAR))
        return cls("cluster", home, servers, [], vars_, extra_config=extra_config, node_timeout_ms=int(raw))

    # -- lifecycle --------------------------------------------------------------------

    def _write_configs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self._forget_other_cluster()
        extra = (*cluster_lines(self.node_timeout_ms), *self.extra_config)
        for proc in self.servers:
            proc.conf.write_text(server_conf(self.name, proc, None, extra))

    def _forget_other_cluster(self) -> None:
        """Wipe the nodes' saved state (``nodes.conf``, AOF) if it describes a cluster on other ports."""
        mine = {proc.port for proc in self.servers}
        saved = [_saved_ports(proc) for proc in self.servers]
        hosts = {proc.host for proc in self.servers}  # --netns or not: the addresses the nodes met each other at
        same_hosts = all(_saved_hosts(proc) <= hosts for proc in self.servers)
        if all(s is None for s in saved) or (all(s == mine for s in saved) and same_hosts):
            return
        log.warning("the saved cluster state under %s is for other ports; starting a new cluster", self.home)
        for proc in self.servers:
            shutil.rmtree(proc.data_dir, ignore_errors=True)

    def start(self, proc: RedisProcess) -> int:
        """Start one node; a busy port or bus port names the variable that moves it."""
        bus = proc.port + ports.CLUSTER_BUS_OFFSET
        if ports.in_use(bus):
            var = self.port_vars.get(proc.port, ports.CLUSTER_PORTS_VAR)
            raise LauncherError(
                f"cluster bus port {bus} (port {proc.port} + {ports.CLUSTER_BUS_OFFSET}) is in use by another "
                f"process; set {var} to ports whose +{ports.CLUSTER_BUS_OFFSET} ports are free"
            )
        return super().start(proc)

    def ensure(self) -> Addresses:
        """Start what is not running, form the cluster if its nodes are new, wait until ready."""
        super().ensure()  # configs written when nothing runs, missing nodes started
        if self._fresh():
            self.form()
        self.wait_ready()
        return self.addresses()

    def _fresh(self) -> bool:
        infos = [cluster_info(proc) for proc in self.servers]
        return all(
            info is not None and info.get("cluster_known_nodes") == "1" and info.get("cluster_slots_assigned") == "0"
            for info in infos
        )

    def form(self) -> None:
        """``redis-cli --cluster create <nodes> --cluster-replicas 1 --cluster-yes``."""
        cli = binaries.require("redis-cli")
        nodes = [f"{proc.host}:{proc.port}" for proc in self.servers]
        args = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"]
        if self.fabric is not None:
            args = self.fabric.exec_argv(None, args)  # from the hub, which reaches every node
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=FORM_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise LauncherError(f"redis-cli --cluster create did not finish in {FORM_TIMEOUT_S:.0f} s") from None
        # redis-cli colours its output even into a pipe; the log and the error line stay plain.
        (self.home / "create.log").write_text(re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr))
        if done.returncode != 0:
            raise LauncherError(
                f"redis-cli --cluster create failed (exit {done.returncode}): {log_tail(self.home / 'create.log', 3)}"
            )
        log.info("formed the cluster on %s", ", ".join(nodes))

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until every node is ok with all slots served and every replica is linked."""
        problem = "not checked yet"

        def ready() -> bool:
            nonlocal problem
            for proc in self.servers:
                if proc.pid() is None:
                    raise LauncherError(f"{proc.name} is not running; {proc.logfile}: {log_tail(proc.logfile)}")
            problem = readiness_problem(self.servers)
            return not problem

        wait_until(ready, timeout_s, lambda: f"the cluster to become ready: {problem} (to start a new cluster: "
                   f"'make down', then remove {self.home})", POLL_S * 2, error=LauncherError)

    # -- addresses and status -----------------------------------------------------------

    def addresses(self) -> Addresses:
        """``url`` names the first live node (any node will do to start a cluster client); ``ports`` all six."""
        live = next((proc for proc in self.servers if proc.pid() is not None), self.servers[0])
        every = tuple(p.port for p in self.servers)
        return Addresses(topology=self.name, url=f"redis://{live.host}:{live.port}/0", ports=every)

    def nodes(self) -> list[ClusterNode]:
        """``CLUSTER NODES`` as the first live node sees it."""
        return any_view(self.servers)

    def master_addr(self) -> Address:
        """The master that serves slot 0 (the first master by slot)."""
        first = masters(self.nodes())
        return ("127.0.0.1", first[0].port if first else self.servers[0].port)

    def status(self) -> TopologyStatus:
        """Each node's role and offset; a master's slot ranges and replica, a replica's master and link."""
        return TopologyStatus(self.name, status_rows(self.servers), ())

    # -- failover -----------------------------------------------------------------------

    def failover(
        self, *, hard: bool = False, timeout_s: float = 30.0, restart_old: bool = True, master_port: int | None = None
    ) -> ClusterFailoverResult:
        """Promote the replica of one master (the one serving slot 0 unless ``master_port`` says).

        ``hard=False`` sends ``CLUSTER FAILOVER`` to the replica (a coordinated switch: the
        master pauses its clients until the replica has caught up). ``hard=True`` kills the
        master with SIGKILL; the other masters flag it failed after ``cluster-node-timeout`` and
        its replica wins the election. Returns once every live node names the new master for
        those slots with ``cluster_state:ok``; with ``restart_old`` the killed master is started
        again and rejoins as a replica of the new one (``ready_s`` times that too).
        """
        view = self.nodes()
        old = self._master(view, master_port)
        candidates = replicas_of(view, old)
        if not candidates:
            raise LauncherError(f"master {old.port} has no live replica to promote")
        new = candidates[0]
        started = time.monotonic()
        if hard:
            self.server(old.port).kill(signal.SIGKILL)
        else:
            with self.server(new.port).client() as client:
                command(client, "CLUSTER", "FAILOVER")
        self.wait_serving(new, old.slots[0][0], started + timeout_s)
        elapsed_s = time.monotonic() - started
        ready_s = None
        if hard and restart_old:
            self.start(self.server(old.port))
        if restart_old or not hard:
            self.wait_ready(max(1.0, started + timeout_s - time.monotonic()))
            ready_s = time.monotonic() - started
        return ClusterFailoverResult(
            ("127.0.0.1", old.port), ("127.0.0.1", new.port), elapsed_s, hard, slots=old.slots, ready_s=ready_s
        )

    def _master(self, view: list[ClusterNode], port: int | None) -> ClusterNode:
        serving = masters(view)
        if not serving:
            raise LauncherError("no live master answers; is the cluster running ('make up-cluster')?")
        if port is None:
            return serving[0]
        for node in serving:
            if node.port == port:
                return node
        raise LauncherError(f"port {port} is not a live master; masters: {[n.port for n in serving]}")

    def wait_serving(self, new: ClusterNode, slot: int, deadline: float) -> None:
        """Poll until every live node says ok and names ``new`` as the master of ``slot``."""
        problem = "not checked yet"

        def serving() -> bool:
            nonlocal problem
            problem = self._serving_problem(new, slot)
            return not problem

        wait_until(serving, seconds_left(deadline),
                   lambda: f"the cluster to settle on {new.port} as master of slot {slot}: {problem}", POLL_S,
                   error=LauncherError)

    def _serving_problem(self, new: ClusterNode, slot: int) -> str:
        for proc in self.servers:
            if proc.pid() is None:
                continue
            info = cluster_info(proc)
            if info is None or info.get("cluster_state") != "ok":
                return f"{proc.name}: cluster_state {info and info.get('cluster_state')}"
            serving = owner(nodes_view(proc) or [], slot)
            if serving is None or serving.node_id != new.node_id:
                return f"{proc.name} names {serving and serving.port} as master of slot {slot}"
        return ""


def _saved_hosts(proc: RedisProcess) -> set[str]:
    """The node addresses a node's ``nodes.conf`` lists (empty when it has none)."""
    path = proc.data_dir / "nodes.conf"
    if not path.exists():
        return set()
    words = (line.split() for line in path.read_text(errors="replace").splitlines())
    return {w[1].split("@")[0].rsplit(":", 1)[0] for w in words if len(w) >= 8 and ":" in w[1]}


def _saved_ports(proc: RedisProcess) -> set[int] | None:
    """The node ports a node's ``nodes.conf`` lists (None when it has none)."""
    path = proc.data_dir / "nodes.conf"
    if not path.exists():
        return None
    return {node.port for node in parse_nodes(path.read_text(errors="replace"))}
