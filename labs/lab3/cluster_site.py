"""Lab 3 on Redis Cluster (``make lab-3 TOPOLOGY=cluster``): the :class:`~labs.lab3.deployment.Deployment`
of the native ``cluster`` topology (3 masters + 3 replicas).

Each cell's stream is ``SHARDS`` shards (one per master: the tags come from ``CLUSTER SLOTS``,
:mod:`solutions.shards`), registered by the lab before its workers and producer start; the
worker gets ``--cluster HOST:PORT`` (every node) and ``--shards``, and so does the producer.
The failover kills (or ``CLUSTER FAILOVER``s) the master that serves slot 0: in every cell it
serves one shard (the *hit* shard, recorded in the fault as the killed master's slot ranges),
while the other two shards' masters live on, and the report checks that those shards never
stopped charging for more than a second. The crash mode's write pause is ``CLIENT PAUSE ...
WRITE`` on every master.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, cast

import redis
from redis.cluster import ClusterNode, RedisCluster

from labs import launcher
from labs.lab3.deployment import Fault
from labs.lab3.streams import CellStreams
from labs.launcher import topologies
from solutions.cluster_router import ClusterRouter
from solutions.settings import Address
from solutions.shards import ensure_shards

SHARDS = 3
FAILOVER_TIMEOUT_S = 30.0
SOCKET_TIMEOUT_S = 1.0


@dataclass
class ClusterDeployment:
    """The native cluster topology (``make up-cluster``), found through ``labs.launcher``."""

    name: ClassVar[str] = "cluster"

    shards: int = SHARDS
    nodes: tuple[Address, ...] = ()
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a cell's stream -> its shards

    def ensure(self) -> None:
        addrs = launcher.ensure("cluster")
        self.nodes = tuple(("127.0.0.1", port) for port in addrs.ports)

    def _cluster_flags(self) -> list[tuple[str, str]]:
        return [*(("cluster", f"{h}:{p}") for h, p in self.nodes), ("shards", str(self.shards))]

    def worker_flags(self) -> list[tuple[str, str]]:
        return self._cluster_flags()

    def worker_env(self) -> dict[str, str]:
        return {"BILLING_CLUSTER": ",".join(f"{h}:{p}" for h, p in self.nodes), "BILLING_SHARDS": str(self.shards)}

    def producer_flags(self) -> list[str]:
        return [arg for name, value in self._cluster_flags() for arg in (f"--{name}", value)]

    def client(self) -> redis.Redis:
        """A ``RedisCluster`` (decoded replies, short timeouts): every key to its slot's master."""
        host, port = self.nodes[0]
        client = RedisCluster(host=host, port=port, decode_responses=True, socket_timeout=SOCKET_TIMEOUT_S,
                              socket_connect_timeout=SOCKET_TIMEOUT_S)
        # Not a redis.Redis subclass, but it answers every command the lab sends through Deployment.client
        # (the Deployment protocol's client type; the cluster-only calls below take it as RedisCluster).
        return cast(redis.Redis, client)

    def cell_streams(self, client: redis.Redis, stream: str) -> CellStreams:
        """The cell's shards, registered with ``SET NX`` in ``<stream>:shards`` on first use."""
        if stream not in self.names:
            self.names[stream] = asyncio.run(self._register(stream))
        return CellStreams(client, self.names[stream])

    async def _register(self, stream: str) -> tuple[str, ...]:
        async with await ClusterRouter.connect(list(self.nodes)) as router:
            return (await ensure_shards(router, stream, self.shards)).names

    def reading_clients(self, client: redis.Redis) -> int:
        """Clients blocked in XREADGROUP on any master."""
        cluster = _cluster(client)
        total = 0
        for node in cluster.get_primaries():
            with contextlib.suppress(redis.RedisError):
                conn = cluster.get_redis_connection(node)
                total += sum(1 for c in conn.client_list() if c.get("cmd") == "xreadgroup")
        return total

    def fail_over(self, hard: bool) -> Fault:
        """``kill -9`` (``hard``) or ``CLUSTER FAILOVER`` of the master that serves slot 0, timed.

        Returns ``kind``, ``old`` and ``new``, ``slots`` (the killed master's slot ranges: the
        shards there are the hit ones), ``fault_t``, ``promoted_t`` and ``promoted_after_s``; after a
        kill the old master is started again and rejoins as a replica (``replica_back_after_s``).
        """
        topo = topologies.from_env("cluster")
        fault_t = time.time()
        done = topo.failover(hard=hard, timeout_s=FAILOVER_TIMEOUT_S, restart_old=True)
        return {"kind": "kill -9" if hard else "CLUSTER FAILOVER", "old": done.old_master, "new": done.new_master,
                "slots": [list(r) for r in done.slots], "fault_t": fault_t, "promoted_t": fault_t + done.elapsed_s,
                "promoted_after_s": done.elapsed_s, "replica_back_after_s": done.ready_s}

    @contextlib.contextmanager
    def pause_writes(self, client: redis.Redis, ms: int) -> Iterator[None]:
        """``CLIENT PAUSE ms WRITE`` on every master, ``CLIENT UNPAUSE`` on the way out."""
        cluster = _cluster(client)
        primaries = cluster.get_primaries()
        for node in primaries:
            cluster.get_redis_connection(node).client_pause(ms, all=False)
        try:
            yield
        finally:
            for node in primaries:
                with contextlib.suppress(redis.RedisError):
                    cluster.get_redis_connection(node).client_unpause()


class _Masters(Protocol):
    """What the lab asks of a ``RedisCluster`` about its masters (redis-py leaves these unannotated)."""

    def get_primaries(self) -> list[ClusterNode]: ...

    def get_redis_connection(self, node: ClusterNode) -> redis.Redis: ...


def _cluster(client: redis.Redis) -> _Masters:
    """The ``RedisCluster`` behind :meth:`ClusterDeployment.client` (typed ``redis.Redis`` by the protocol)."""
    if not isinstance(client, RedisCluster):
        raise TypeError(f"a cluster deployment takes the RedisCluster its client() made, not {type(client).__name__}")
    return client
