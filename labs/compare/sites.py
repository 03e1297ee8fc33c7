"""Where each row's broker runs: the clusters of one comparison, started on free ports under one folder.

A :class:`Site` makes a :class:`~labs.compare.contract.Broker` for a queue (stream) name, kills the
leader of that queue with SIGKILL, restarts it, and reads the brokers' RSS. ``address`` is plain
JSON, so a consumer in another process (the crash scenario) builds the same broker.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from labs.compare.contract import Broker, Settings
from labs.launcher import topologies
from labs.launcher.nats import NatsCluster
from labs.launcher.rabbitmq import RabbitCluster
from labs.launcher.topology import SentinelTopology

log = logging.getLogger(__name__)
KINDS = ("redis", "redis+WAIT", "rabbitmq", "nats")
AOF = ("appendonly yes", "appendfsync everysec")
Cluster = SentinelTopology | RabbitCluster | NatsCluster


class BrokerAddress(TypedDict, total=False):
    """Where a row's brokers answer, as JSON: Redis's ``sentinels`` ([host, port] pairs) or the ``urls``."""

    sentinels: list[list[str | int]]
    urls: list[str]


def make_broker(kind: str, address: BrokerAddress, queue: str, settings: Settings) -> Broker:
    """The adapter of ``kind`` for ``queue`` at ``address`` (``sentinels`` or ``urls``)."""
    if kind.startswith("redis"):
        from dataclasses import replace

        from labs.compare.redis_broker import RedisBroker

        wait = 1 if kind == "redis+WAIT" else 0
        return RedisBroker([(str(h), int(p)) for h, p in address["sentinels"]], queue,
                           replace(settings, wait_replicas=wait))
    if kind == "rabbitmq":
        from labs.compare.rabbit_broker import RabbitBroker

        return RabbitBroker(address["urls"], queue, settings)
    if kind == "nats":
        from labs.compare.nats_broker import NatsBroker

        return NatsBroker(address["urls"], queue, settings)
    raise ValueError(f"unknown broker {kind!r}; choose one of {', '.join(KINDS)}")


@dataclass
class Site:
    kind: str
    address: BrokerAddress
    cluster: Cluster

    def broker(self, queue: str, settings: Settings) -> Broker:
        return make_broker(self.kind, self.address, queue, settings)

    def leader_port(self, queue: str) -> int:
        if isinstance(self.cluster, SentinelTopology):
            return self.cluster.master_addr()[1]
        return int(self.cluster.leader_port(queue))

    def kill_leader(self, queue: str) -> int:
        """kill -9 of the node leading ``queue`` (Redis: the master); its port."""
        port = self.leader_port(queue)
        if isinstance(self.cluster, SentinelTopology):
            self.cluster.kill(port, signal.SIGKILL)
        elif isinstance(self.cluster, RabbitCluster):
            self.cluster.kill_node(port)
        else:
            self.cluster.kill_server(port)
        log.info("%s: kill -9 of the leader on port %s", self.kind, port)
        return port

    def restart(self, port: int, queue: str) -> None:
        """Start the killed node again and wait until the queue has all its replicas."""
        if isinstance(self.cluster, SentinelTopology):
            old = (self.cluster.server(port).host, port)
            new = self.cluster.wait_new_master(old, _deadline(30))
            self.cluster.wait_switched(new, _deadline(30))  # before the old master answers again
            self.cluster.start(self.cluster.server(port))
            self.cluster.wait_ready()
        elif isinstance(self.cluster, RabbitCluster):
            self.cluster.restart_node(port)
            self.cluster.wait_queue(queue, 90)
        else:
            self.cluster.restart_server(port)

    def rss_bytes(self) -> int:
        from labs.launcher.broker_process import rss_bytes

        if isinstance(self.cluster, SentinelTopology):
            return sum(rss_bytes(p.pid()) for p in self.cluster.servers)
        return int(self.cluster.rss_total_bytes())


def _deadline(seconds: float) -> float:
    import time

    return time.monotonic() + seconds


@dataclass
class Sites:
    """The clusters of one run; :meth:`stop` stops every process they started."""

    run_dir: Path
    sites: dict[str, Site] = field(default_factory=dict)
    clusters: list[Cluster] = field(default_factory=list)

    def start(self, kinds: tuple[str, ...]) -> Sites:
        """Start the clusters of ``kinds``; they are stopped at the latest when this process exits
        (a notebook whose cell failed before its last one, a run interrupted)."""
        import atexit

        atexit.register(self.stop)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if any(k.startswith("redis") for k in kinds):
            topo = topologies.on_free_ports("sentinel", self.run_dir / "redis", down_after_ms=1000, extra_config=AOF)
            self.clusters.append(topo)
            addrs = topo.ensure()
            address: BrokerAddress = {"sentinels": [list(s) for s in addrs.sentinels]}
            for kind in (k for k in kinds if k.startswith("redis")):
                self.sites[kind] = Site(kind, address, topo)
        if "rabbitmq" in kinds:
            self.sites["rabbitmq"] = self._broker_site("rabbitmq", RabbitCluster.on_free_ports(self.run_dir))
        if "nats" in kinds:
            self.sites["nats"] = self._broker_site("nats", NatsCluster.on_free_ports(self.run_dir))
        return self

    def _broker_site(self, kind: str, cluster: RabbitCluster | NatsCluster) -> Site:
        self.clusters.append(cluster)
        urls = cluster.ensure()
        return Site(kind, {"urls": urls}, cluster)

    def stop(self) -> list[int]:
        stopped: list[int] = []
        for cluster in self.clusters:
            try:
                stopped += cluster.stop()
            except Exception:  # one cluster's trouble must not leave the others running
                log.exception("stopping %s", type(cluster).__name__)
        return stopped
