"""What one XREADGROUP costs on a cluster: redis-py's ``RedisCluster`` against the shard router.

``RedisCluster`` learns a command's slot from its keys. For most commands it finds them in
the ``COMMAND`` table it loaded at start, but XREADGROUP's keys follow the ``STREAMS`` keyword
(the command is flagged ``movablekeys``), so before every XREADGROUP it sends ``COMMAND GETKEYS
XREADGROUP ...`` to one node, and redis-py 8.1 does it twice (``execute_command`` asks to pick a
request policy, ``_determine_nodes`` asks again to pick the node). The shard router
(:mod:`solutions.cluster_router`) knows each shard's slot before the first command and sends
only the XREADGROUP.

:func:`measure` counts the commands every node executed (``INFO commandstats`` after ``CONFIG
RESETSTAT``) and times the reads, in interleaved rounds so that a busy machine hurts every
client alike; a plain client connected to the owning master is the floor.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from labs.launcher.cluster import ClusterTopology
from solutions.cluster_router import ClusterRouter

GROUP = "g"
CONSUMER = "c"
PENDING = 10  # each read returns this consumer's 10 pending entries (ID 0: a read that changes nothing)


@dataclass(frozen=True)
class ReadCost:
    client: str
    commands_per_read: float  # commands the cluster executed per XREADGROUP, all nodes together
    getkeys_per_read: float  # of which COMMAND GETKEYS
    us_per_read: float  # median over the rounds of the mean time per read


async def measure(topology: ClusterTopology, *, stream: str, reads: int = 300, rounds: int = 5) -> list[ReadCost]:
    """Each client does ``reads`` XREADGROUPs per round; commands counted in one extra round on its own."""
    port = topology.addresses().ports[0]
    cluster = RedisCluster(host="127.0.0.1", port=port)
    router = await ClusterRouter.connect([("127.0.0.1", port)])
    shard = router.client(stream)
    owner = router.owner(stream)
    assert owner is not None
    plain = aioredis.Redis(host=owner[0], port=owner[1])
    try:
        await _prepare(plain, stream)
        clients: dict[str, Callable[[], Awaitable[object]]] = {
            "RedisCluster": lambda: cluster.xreadgroup(GROUP, CONSUMER, {stream: "0"}, count=PENDING),
            "ClusterRouter": lambda: shard.xreadgroup(GROUP, CONSUMER, {stream: "0"}, count=PENDING),
            "plain client on the owner": lambda: plain.xreadgroup(GROUP, CONSUMER, {stream: "0"}, count=PENDING),
        }
        for read in clients.values():
            await read()  # connections open, RedisCluster initialized
        counted = {name: await _count(topology, read, reads) for name, read in clients.items()}
        timings: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(rounds):
            for name, read in clients.items():
                started = time.perf_counter()
                for _ in range(reads):
                    await read()
                timings[name].append((time.perf_counter() - started) / reads * 1e6)
        await plain.delete(stream)
    finally:
        await cluster.aclose()
        await router.aclose()
        await plain.aclose()
    return [
        ReadCost(name, counted[name][0] / reads, counted[name][1] / reads, statistics.median(timings[name]))
        for name in clients
    ]


async def _prepare(client: aioredis.Redis, stream: str) -> None:
    await client.delete(stream)
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    for i in range(PENDING):
        await client.xadd(stream, {"n": str(i)})
    await client.xreadgroup(GROUP, CONSUMER, {stream: ">"}, count=PENDING)


async def _count(topology: ClusterTopology, read: Callable[[], Awaitable[object]], reads: int) -> tuple[int, int]:
    """(all commands, COMMAND GETKEYS) the nodes executed for ``reads`` reads."""
    await asyncio.to_thread(_reset_stats, topology)
    for _ in range(reads):
        await read()
    stats = await asyncio.to_thread(_command_stats, topology)
    # What the measurement itself and the replication links send: probes, REPLCONF ACK from replicas;
    # and a new connection's handshake: HELLO, and redis-py's CLIENT SETINFO (counted from Redis 7.2 on,
    # where it exists; 7.0 rejects it, so it never reached its commandstats).
    ignored = {"info", "config|resetstat", "hello", "client|setinfo", "cluster|nodes", "replconf", "ping"}
    total = sum(calls for name, calls in stats.items() if name not in ignored)
    return total, stats.get("command|getkeys", 0)


def _reset_stats(topology: ClusterTopology) -> None:
    for proc in topology.servers:
        with contextlib.closing(proc.client()) as client:
            client.config_resetstat()


def _command_stats(topology: ClusterTopology) -> dict[str, int]:
    """``INFO commandstats`` of the masters, summed (replicas only replay what their master writes)."""
    totals: dict[str, int] = {}
    for node in topology.nodes():
        if not node.is_master:
            continue
        with contextlib.closing(topology.server(node.port).client()) as client:
            for name, value in client.info("commandstats").items():
                key = name.removeprefix("cmdstat_")
                totals[key] = totals.get(key, 0) + int(value["calls"])
    return totals
