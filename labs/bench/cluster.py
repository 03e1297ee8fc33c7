"""The bench on Redis Cluster: throughput against the number of shards, and kill -9 of a master to the first charge.

- :func:`scaling`: :func:`labs.experiments.cluster_scaling.throughput` for each number of shards,
  with a 5 ms handler (the figure is its ratio to ideal linear scaling, N x one shard) and with
  none (msgs/s: what one worker process does with N shards when nothing waits).
- :func:`one_kill`: the sharded worker under load on three shards, a raw writer beside it (redis-py's
  own ``RedisCluster``, XADD every few ms to a key in the slot of shard 0, a short pause on error),
  then kill -9 of shard 0's master. The raw writer marks when the promoted replica first takes a
  write; no worker can charge on that shard before, so the gap between the two is what the worker
  adds. The other shards' longest pause in charging is kept too.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.asyncio.cluster import RedisCluster

from labs.experiments.cluster_load import ShardWriters, longest_gaps, read_charges
from labs.experiments.cluster_scaling import ThroughputPoint, throughput

__all__ = ["ClusterRecovery", "ThroughputPoint", "one_kill", "scaling"]
from labs.experiments.cluster_worker import running, startup_nodes, worker_settings
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import owner, replicas_of
from labs.polling import wait_until_async
from solutions.cluster_router import ClusterRouter, RoutingOptions
from solutions.shards import ensure_shards, slot_of
from solutions.worker import Worker

PROBE_INTERVAL_S = 0.005
SAMPLE_S = 0.002
READY_TIMEOUT_S = 30.0


async def scaling(
    topology: ClusterTopology, workdir: Path, *, stream: str, shard_counts: tuple[int, ...], per_shard: int,
    handler_delay_ms: int,
) -> list[ThroughputPoint]:
    """Charges per second for each number of shards (one worker, 4 handler slots per shard)."""
    folder = workdir / f"{stream.replace(':', '-')}"
    folder.mkdir(parents=True, exist_ok=True)
    # A waiting handler: 4 slots and a read of 8 per shard. None: reads of 100, as the rest of the bench.
    count = 8 if handler_delay_ms else 100
    return await throughput(topology, stream=stream, ledger_dir=folder, shard_counts=shard_counts,
                            per_shard=per_shard, handler_delay_ms=handler_delay_ms, count=count)


@dataclass(frozen=True)
class ClusterRecovery:
    worker_s: float  # kill -9 to the worker's first charge on the killed master's shard
    writer_s: float  # kill -9 to the raw writer's first XADD to that shard's slot
    promoted_s: float  # kill -9 to every live node naming the new master
    others_gap_s: float  # the other shards' longest pause in charging around the kill


async def _probe_client(startup: list[tuple[str, int]], key: str) -> RedisCluster:
    """redis-py's RedisCluster, connected and with the slot map loaded: its first XADD on ``key`` has
    been answered. Awaited before the kill, so that the probe's start is confirmed, not assumed."""
    client = RedisCluster(host=startup[0][0], port=startup[0][1], socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        await asyncio.wait_for(client.xadd(key, {"probe": "0"}), READY_TIMEOUT_S)
    except BaseException:
        await client.aclose()
        raise
    return client


async def _first_write_after(client: RedisCluster, key: str, killed_at: asyncio.Future[float]) -> float:
    """Seconds from the kill to the probe client's first successful XADD on ``key``."""
    at = await killed_at
    while True:
        try:
            await client.xadd(key, {"probe": "1"})
            return time.monotonic() - at
        except (redis.RedisError, OSError):
            await asyncio.sleep(PROBE_INTERVAL_S)


async def _acked_past(worker: Worker, shard: str, floor: int, what: str) -> None:
    """Wait until the worker has acked more than ``floor`` messages of ``shard``, sampling every
    ``SAMPLE_S`` (the recovery figures are read off this); TimeoutError naming ``what``."""
    await wait_until_async(lambda: worker.shard_counts()[shard].acked > floor, READY_TIMEOUT_S, what, SAMPLE_S)


async def one_kill(topology: ClusterTopology, ledger: Path, stream: str, *, rate: float = 300.0) -> ClusterRecovery:
    """Load on three shards, the worker and the raw writer; kill -9 shard 0's master; time both recoveries.

    The load's writers retry every 10-20 ms (as the raw writer does), so that what the worker's
    first charge measures is the worker, not a writer still backing off. Everything the kill
    needs in place (the worker charging on the shard, the probe connected with its slot map) is
    confirmed before the kill, never assumed after a sleep.
    """
    startup = startup_nodes(topology)
    fast = RoutingOptions(backoff_base_s=0.01, backoff_cap_s=0.02)
    async with await ClusterRouter.connect(startup, fast) as router:
        shards = await ensure_shards(router, stream, 3)
        hit = shards.names[0]
        view = await asyncio.to_thread(topology.nodes)
        old = owner(view, slot_of(hit))
        assert old is not None
        new = replicas_of(view, old)[0]
        writers, stop = ShardWriters(router, shards, rate=rate), asyncio.Event()
        killed_at: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        async with running(worker_settings(startup, stream, 3, ledger)) as worker:
            loading = asyncio.create_task(writers.run(stop))
            await _acked_past(worker, hit, 19, "the worker's first 20 charges on the shard to kill")
            probe_client = await _probe_client(startup, f"{hit}:probe")
            try:
                probe = asyncio.create_task(_first_write_after(probe_client, f"{hit}:probe", killed_at))
                at, wall_at = time.monotonic(), time.time()
                await asyncio.to_thread(topology.server(old.port).kill, signal.SIGKILL)  # returns once it is gone
                before = worker.shard_counts()[hit].acked
                killed_at.set_result(at)
                await asyncio.to_thread(topology.wait_serving, new, slot_of(hit), at + 30)
                promoted_s = time.monotonic() - at
                await _acked_past(worker, hit, before, "the worker's first charge on the shard after the kill")
                worker_s = time.monotonic() - at
                writer_s = await asyncio.wait_for(probe, 30)
            finally:
                await probe_client.aclose()
            stop.set()
            await loading
        # From just before the kill until the killed shard charged again: the others must charge all along.
        gaps = longest_gaps(read_charges(ledger), 3, since=wall_at - 0.2, until=wall_at + worker_s)
        await router.client(hit).delete(f"{hit}:probe")
    await asyncio.to_thread(_rejoin, topology, old.port)
    return ClusterRecovery(worker_s, writer_s, promoted_s, max(gaps[1:]))


def _rejoin(topology: ClusterTopology, port: int) -> None:
    """The killed master back, as a replica of the new one, so that the next round can kill again."""
    topology.start(topology.server(port))
    topology.wait_ready()
