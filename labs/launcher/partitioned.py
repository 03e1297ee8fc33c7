"""The comparison's three clusters in network namespaces, with two client namespaces, ready to be cut.

What :mod:`labs.compare.partition_case` needs from the launcher, the same for every broker: a
cluster whose every process has a namespace of its own (:mod:`labs.launcher.netns`), two more
namespaces for clients (:data:`CLIENT_MIN` on the leader's side of a cut, :data:`CLIENT_MAJ` with
the majority), where the queue's leader is (a fabric member's name), how to split the members
into the leader's side and the majority, the addresses of a side's members (as the comparison's
adapters take them: ``sentinels`` or ``urls``, plus how the cluster was set up), what a confirm
means, and the server timers a partition meets, by name.

- :class:`RedisPartitioned`: three copies under Sentinel (:mod:`labs.launcher.redis_copies`); the
  leader's side is the master and one sentinel, the majority two replicas and two sentinels;
- :class:`NatsPartitioned`: three nats-servers (:meth:`NatsCluster.in_namespaces`);
- :class:`RabbitPartitioned`: three RabbitMQ nodes, each with its epmd (:meth:`RabbitCluster.in_namespaces`).

Each is started by its ``start`` and removed, namespaces and all, by ``stop``; the processes are
owned by the calling process (they stop when it exits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from labs.launcher import netns, redis_copies
from labs.launcher.errors import LauncherError
from labs.launcher.nats import NatsCluster, wait_stream
from labs.launcher.rabbitmq import RabbitCluster
from labs.launcher.topology import SentinelTopology

T = TypeVar("T")
CLIENT_MIN = "client-min"
CLIENT_MAJ = "client-maj"
Address = dict[str, object]  # the comparison's BrokerAddress, as JSON


class Partitioned(Protocol):
    """A cluster in namespaces, as the partition case drives it."""

    @property
    def fabric(self) -> netns.Fabric: ...

    def wait_queue(self, queue: str) -> None: ...  # every replica of ``queue`` is current

    def leader(self, queue: str) -> str: ...  # the fabric member that leads ``queue``

    def sides(self, leader: str) -> tuple[list[str], list[str]]: ...  # (leader's side, majority), no clients

    def address(self, members: list[str]) -> Address: ...  # ``members``' endpoints; all when empty

    def durability(self, wait_replicas: int = 0) -> str: ...

    def timers(self) -> str: ...

    def stop(self) -> list[int]: ...


def in_hub(fabric: netns.Fabric, fn: Callable[[], T]) -> T:
    """``fn()`` from the fabric's hub namespace, which reaches every member (also while one is cut off)."""
    return netns.call_in(fabric.hub_ns, fn)


def _planned(fabric: netns.Fabric | None) -> netns.Fabric:
    """The fabric ``in_namespaces()`` planned for a cluster."""
    if fabric is None:
        raise LauncherError("the cluster was not put in namespaces (in_namespaces() first)")
    return fabric


def _add_clients(fabric: netns.Fabric) -> None:
    for name in (CLIENT_MIN, CLIENT_MAJ):
        fabric.add(name)


@dataclass
class RedisPartitioned:
    """Three copies under Sentinel (min-replicas-to-write 1), each process in a namespace."""

    topo: SentinelTopology
    copies: redis_copies.Copies

    @property
    def fabric(self) -> netns.Fabric:
        assert self.topo.fabric is not None
        return self.topo.fabric

    @classmethod
    def start(cls, run_dir: Path, copies: redis_copies.Copies | None = None) -> RedisPartitioned:
        copies = copies or redis_copies.Copies()
        topo = redis_copies.three_copies(run_dir / "redis", copies, netns=True)
        site = cls(topo, copies)
        try:
            topo.ensure()
            redis_copies.own(topo)
            _add_clients(site.fabric)
        except BaseException:
            topo.stop()
            raise
        return site

    def wait_queue(self, queue: str) -> None:
        self.topo.wait_ready()

    def leader(self, queue: str) -> str:
        return f"redis-{self.topo.master_addr()[1]}"

    def sides(self, leader: str) -> tuple[list[str], list[str]]:
        others = [p.name for p in self.topo.servers if p.name != leader]
        watchers = [p.name for p in self.topo.sentinels]
        return [leader, watchers[0]], [*others, *watchers[1:]]

    def address(self, members: list[str]) -> Address:
        sentinels = [[p.host, p.port] for p in self.topo.sentinels if not members or p.name in members]
        return {"sentinels": sentinels, "copies": self.copies.replicas + 1, "appendfsync": self.copies.fsync,
                "min_replicas_to_write": self.copies.min_replicas_to_write}

    def durability(self, wait_replicas: int = 0) -> str:
        return self.copies.durability(wait_replicas)

    def timers(self) -> str:
        return (f"Sentinel down-after-milliseconds {self.copies.down_after_ms} ms, then 2 of 3 sentinels vote "
                "and promote a replica; the cut-off master keeps taking writes until no replica has acked for "
                f"min-replicas-max-lag {self.copies.min_replicas_max_lag_s} s (min-replicas-to-write "
                f"{self.copies.min_replicas_to_write}), and at the heal becomes a replica: what it took alone is gone")

    def stop(self) -> list[int]:
        return self.topo.stop()


@dataclass
class NatsPartitioned:
    """Three nats-servers (JetStream R3), each in a namespace; ``sync_always`` for the fsync-per-write row."""

    cluster: NatsCluster

    @property
    def fabric(self) -> netns.Fabric:
        assert self.cluster.fabric is not None
        return self.cluster.fabric

    @classmethod
    def start(cls, run_dir: Path, sync_always: bool = False) -> NatsPartitioned:
        cluster = NatsCluster.on_free_ports(run_dir)
        cluster.sync_always = sync_always
        cluster.in_namespaces()
        try:
            cluster.ensure()
            _add_clients(_planned(cluster.fabric))
        except BaseException:
            cluster.stop()
            raise
        return cls(cluster)

    def wait_queue(self, queue: str) -> None:
        urls = self.cluster.urls()
        in_hub(self.fabric, lambda: asyncio.run(wait_stream(urls, queue, 60.0)))

    def leader(self, queue: str) -> str:
        return self.cluster.server_name(self.cluster.leader_port(queue))

    def sides(self, leader: str) -> tuple[list[str], list[str]]:
        return [leader], [p.name for p in self.cluster.servers if p.name != leader]

    def address(self, members: list[str]) -> Address:
        urls = [url for port, url in zip(self.cluster.client_ports, self.cluster.urls(), strict=True)
                if not members or self.cluster.server_name(port) in members]
        return {"urls": urls, "sync_always": self.cluster.sync_always}

    def durability(self, wait_replicas: int = 0) -> str:
        return self.cluster.durability()

    def timers(self) -> str:
        return ("NATS Raft (server/raft.go constants, not settings): a follower campaigns after 4-9 s without "
                "the leader (minElectionTimeout..maxElectionTimeout), heartbeats every 1 s; a leader without a "
                "quorum steps down after 10 s (lostQuorumInterval); no PubAck without a majority")

    def stop(self) -> list[int]:
        return self.cluster.stop()


@dataclass
class RabbitPartitioned:
    """Three RabbitMQ 3.10 nodes (quorum queue of 3), each with its epmd in a namespace.

    Measured here (a silent cut of the queue's leader, producers at 10/s): with Erlang's default
    net_ticktime of 60 s a 20 s cut saw no new leader before the heal and an 80 s cut the first
    charge 71.7 s after it; with ``net_ticktime_s=10`` a 20 s cut saw it 15.9 s after the cut.
    """

    cluster: RabbitCluster

    @property
    def fabric(self) -> netns.Fabric:
        assert self.cluster.fabric is not None
        return self.cluster.fabric

    @classmethod
    def start(cls, run_dir: Path, net_ticktime_s: int | None = None) -> RabbitPartitioned:
        """``net_ticktime_s``: the Erlang distribution's failure detection (None: its default, 60 s)."""
        cluster = RabbitCluster.on_free_ports(run_dir)
        cluster.net_ticktime_s = net_ticktime_s
        cluster.in_namespaces()
        try:
            cluster.ensure()
            _add_clients(_planned(cluster.fabric))
        except BaseException:
            cluster.stop()
            raise
        return cls(cluster)

    def wait_queue(self, queue: str) -> None:
        self.cluster.wait_queue(queue, 60.0)

    def leader(self, queue: str) -> str:
        return f"rabbit-{self.cluster.leader_port(queue)}"

    def sides(self, leader: str) -> tuple[list[str], list[str]]:
        return [leader], [f"rabbit-{p}" for p in self.cluster.amqp_ports if f"rabbit-{p}" != leader]

    def address(self, members: list[str]) -> Address:
        return {"urls": [url for port, url in zip(self.cluster.amqp_ports, self.cluster.urls(), strict=True)
                         if not members or f"rabbit-{port}" in members]}

    def durability(self, wait_replicas: int = 0) -> str:
        return ("RabbitMQ 3.10 quorum queue, 3 copies: the confirm once a majority (2 of 3) has written "
                "and fsynced it (Ra's WAL)")

    def timers(self) -> str:
        ticktime = self.cluster.net_ticktime_s
        shown = "net_ticktime 60 s (Erlang's default)" if ticktime is None else f"net_ticktime {ticktime} s"
        return ("Ra (quorum queue) on RabbitMQ 3.10: under a silent cut the followers elect no new leader "
                f"before the Erlang distribution declares the leader's node down: {shown}, a peer silent for "
                "0.75-1.25 x that is down; aten, Ra's failure detector, polls every 1000 ms "
                "(raft.adaptive_failure_detector.poll_interval from 3.11); cluster_partition_handling ignore "
                "(the default); no confirm without a majority")

    def stop(self) -> list[int]:
        return self.cluster.stop()
