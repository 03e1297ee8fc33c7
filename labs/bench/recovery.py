"""Failover recovery: kill -9 the master under load; how soon does charging resume?

Beside the worker, in the same run and on the same failover, a plain redis-py writer through
Sentinel (XADD every few ms, a short pause on error) marks when the new master first accepts a
write: no worker can charge before that, so the gap between the two is what the worker adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from labs.experiments.ceiling import order_fields
from labs.experiments.worker_runs import bench_settings
from labs.launcher.sentinel import async_master_client
from labs.launcher.topology import MASTER_NAME, SentinelTopology
from labs.polling import wait_until_async
from solutions.worker import Worker

log = logging.getLogger(__name__)

LOAD_INTERVAL_S = 0.005
PROBE_INTERVAL_S = 0.005
SAMPLE_S = 0.002


@dataclass(frozen=True)
class Recovery:
    worker_s: float
    writer_s: float
    promoted_s: float


def _sentinel_client(topo: SentinelTopology) -> redis.asyncio.Redis:
    sentinels = [("127.0.0.1", s.port) for s in topo.sentinels]
    return async_master_client(sentinels, MASTER_NAME, socket_timeout=0.5, socket_connect_timeout=0.5)


async def _load(topo: SentinelTopology, stream: str, stop: asyncio.Event) -> None:
    """Keep producing while the test runs, whatever the master does."""
    client = _sentinel_client(topo)
    i = 0
    while not stop.is_set():
        try:
            await client.xadd(stream, order_fields(i))
            i += 1
            await asyncio.sleep(LOAD_INTERVAL_S)
        except (redis.RedisError, OSError):
            await asyncio.sleep(0.02)
    await client.aclose()


@dataclass
class Kill:
    """Set once the master is gone; ``at`` is the monotonic time just before SIGKILL."""

    event: asyncio.Event
    at: float = 0.0


def _kill_master(topo: SentinelTopology, kill: Kill, loop: asyncio.AbstractEventLoop) -> float:
    """SIGKILL the master, tell the loop, wait for the quorum; returns seconds to promotion."""
    old = topo.master_addr()
    kill.at = time.monotonic()
    topo.kill(old[1])
    loop.call_soon_threadsafe(kill.event.set)
    topo.wait_new_master(old, kill.at + 30.0)
    return time.monotonic() - kill.at


async def _first_write_after(topo: SentinelTopology, key: str, kill: Kill, stop: asyncio.Event) -> float:
    """The plain writer: seconds from the kill to its first successful XADD."""
    client = _sentinel_client(topo)
    await kill.event.wait()
    try:
        while not stop.is_set():
            try:
                await client.xadd(key, {"probe": "1"})
                return time.monotonic() - kill.at
            except (redis.RedisError, OSError):
                await asyncio.sleep(PROBE_INTERVAL_S)
        raise RuntimeError("the plain writer never wrote after the kill")
    finally:
        await client.aclose()


async def _first_ack_after(worker: Worker, kill: Kill, stop: asyncio.Event) -> float:
    """The worker: seconds from the kill to its first ack (a charge acked on the new master)."""
    await kill.event.wait()
    before = worker.counts.acked
    while not stop.is_set():
        if worker.counts.acked > before:
            return time.monotonic() - kill.at
        await asyncio.sleep(SAMPLE_S)
    raise RuntimeError("the worker never charged after the kill")


async def _under_load(worker: Worker, acked: int, timeout_s: float) -> None:
    """Wait (with a deadline) until the worker has acked ``acked`` messages: the kill comes only
    once the worker is confirmed to be charging, never after a guessed pause."""
    await wait_until_async(lambda: worker.counts.acked >= acked, timeout_s, f"the worker's first {acked} acks", 0.01)


async def one_failover(topo: SentinelTopology, ledger: Path, stream: str, timeout_s: float = 30.0) -> Recovery:
    """Load, a worker and a plain writer; kill -9 the master; time both recoveries."""
    settings = replace(
        bench_settings(topo.url, stream, dedupe="sqlite", ledger=ledger, parallelism=8, count=16),
        sentinels=tuple(("127.0.0.1", s.port) for s in topo.sentinels),
        master_name=MASTER_NAME,
        consumer="bench-failover",
    )
    worker = Worker(settings)
    stop, kill = asyncio.Event(), Kill(asyncio.Event())
    worker_task = asyncio.create_task(worker.run())
    load_task = asyncio.create_task(_load(topo, stream, stop))
    try:
        await _under_load(worker, 50, timeout_s)
        writer = asyncio.create_task(_first_write_after(topo, f"{stream}:probe", kill, stop))
        charger = asyncio.create_task(_first_ack_after(worker, kill, stop))
        promoted_s = await asyncio.to_thread(_kill_master, topo, kill, asyncio.get_running_loop())
        writer_s, worker_s = await asyncio.wait_for(asyncio.gather(writer, charger), timeout_s)
    finally:
        stop.set()
        worker.request_stop()
        await asyncio.gather(worker_task, load_task, return_exceptions=True)
    await asyncio.to_thread(_heal, topo)
    return Recovery(worker_s=worker_s, writer_s=writer_s, promoted_s=promoted_s)


def _heal(topo: SentinelTopology) -> None:
    """Bring the killed master back (as a replica) so that the next round can fail over again."""
    topo.ensure()
    with contextlib.suppress(Exception):
        topo.wait_ready()
