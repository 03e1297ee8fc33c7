"""Per-key ordering in a worker pool (course module 3, section 3.4): violations with and without lanes.

:func:`ordering_run` puts ``keys * per_key`` events on a stream, round-robin over the keys,
each with its sequence number within its key. One asyncio consumer reads them with
``XREADGROUP COUNT`` and hands them to a bounded pool of ``parallelism``: either each event
to any free slot (no lanes), or each event to the lane ``crc32(key) % parallelism`` whose
single task handles its queue in order (the course's ``map[hash(key)] -> channel ->
goroutine``). A handling takes a seeded random time, then appends the sequence number to
a Redis list per key and acks. A violation is an event applied after a later event of
the same key.

:func:`delivery_order` shows where the order comes from and where it goes: a group hands
its entries out strictly by ID, across its consumers, and a redelivery (``XAUTOCLAIM``)
hands an old entry out after newer ones.

Tests in ``tests/test_ordering.py``.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis

from labs import replies

GROUP = "billing"


@dataclass(frozen=True)
class OrderingRun:
    """One run: events, violations of per-key order, and the time it took."""

    lanes: bool
    events: int
    violations: int
    keys_out_of_order: int
    elapsed_s: float


def delivery_order(client: redis.Redis, stream: str) -> tuple[list[str], list[str]]:
    """Five entries, read by ``a`` and ``b`` in turns (``COUNT 1``); then ``a``'s first entry is reclaimed.

    Returns the stream's ids and the ids in the order the group handed them out: four reads,
    then the rescuer's ``XAUTOCLAIM`` (``a`` died holding its first entry), then one more read.
    """
    client.delete(stream)
    client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = [str(client.xadd(stream, {"n": str(i)})) for i in range(5)]
    handed_out: list[str] = []
    for consumer in ("a", "b", "a", "b"):
        reply = replies.read(client.xreadgroup(GROUP, consumer, {stream: ">"}, count=1))
        handed_out.append(str(reply[0][1][0][0]))
    claimed = client.xautoclaim(stream, GROUP, "rescuer", min_idle_time=0, start_id="0-0", count=1)
    handed_out.append(str(claimed[1][0][0]))
    reply = replies.read(client.xreadgroup(GROUP, "b", {stream: ">"}, count=1))
    handed_out.append(str(reply[0][1][0][0]))
    client.delete(stream)
    return ids, handed_out


def violations(applied: list[int]) -> int:
    """Events applied after an event with a higher sequence number of the same key."""
    highest, count = -1, 0
    for seq in applied:
        if seq < highest:
            count += 1
        highest = max(highest, seq)
    return count


async def ordering_run(
    redis_url: str,
    stream: str,
    *,
    lanes: bool,
    keys: int = 5,
    per_key: int = 20,
    parallelism: int = 8,
    work_ms: tuple[int, int] = (1, 12),
    seed: int = 3,
) -> OrderingRun:
    """Produce, consume through the pool (with or without lanes), count the order violations."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await client.delete(stream, *(f"{stream}:applied:k{k}" for k in range(keys)))
        await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        for seq in range(per_key):
            for k in range(keys):
                await client.xadd(stream, {"order_id": f"k{k}", "seq": str(seq)})
        rng = random.Random(seed)
        started = time.monotonic()
        handle = _handler(client, stream, rng, work_ms)
        if lanes:
            await _consume_with_lanes(client, stream, keys * per_key, parallelism, handle)
        else:
            await _consume_any_slot(client, stream, keys * per_key, parallelism, handle)
        elapsed_s = time.monotonic() - started
        applied = [[int(x) for x in await client.lrange(f"{stream}:applied:k{k}", 0, -1)] for k in range(keys)]
    finally:
        await client.aclose()
    counts = [violations(seqs) for seqs in applied]
    return OrderingRun(lanes, keys * per_key, sum(counts), sum(1 for c in counts if c), elapsed_s)


Handle = Callable[[str, dict[str, str]], Awaitable[None]]


def _handler(client: aioredis.Redis, stream: str, rng: random.Random, work_ms: tuple[int, int]) -> Handle:
    async def handle(msg_id: str, fields: dict[str, str]) -> None:
        await asyncio.sleep(rng.uniform(*work_ms) / 1000)  # the work
        await client.rpush(f"{stream}:applied:{fields['order_id']}", fields["seq"])
        await client.xack(stream, GROUP, msg_id)

    return handle


async def _read(client: aioredis.Redis, stream: str, count: int) -> list[tuple[str, dict[str, str]]]:
    reply = await client.xreadgroup(GROUP, "worker", {stream: ">"}, count=count, block=100)
    return [(msg_id, fields) for _stream, entries in replies.read(reply or []) for msg_id, fields in entries]


async def _consume_any_slot(client: aioredis.Redis, stream: str, total: int, parallelism: int, handle: Handle) -> None:
    """Each event to any free slot: the semaphore is the pool (and the reader's backpressure)."""
    slots = asyncio.Semaphore(parallelism)
    tasks: list[asyncio.Task[None]] = []

    async def run(msg_id: str, fields: dict[str, str]) -> None:
        try:
            await handle(msg_id, fields)
        finally:
            slots.release()

    read = 0
    while read < total:
        for msg_id, fields in await _read(client, stream, parallelism):
            await slots.acquire()  # no free slot: the loop stops reading
            tasks.append(asyncio.create_task(run(msg_id, fields)))
            read += 1
    await asyncio.gather(*tasks)


async def _consume_with_lanes(
    client: aioredis.Redis, stream: str, total: int, parallelism: int, handle: Handle
) -> None:
    """Each event to the lane of its key: one task per lane handles its queue in order."""
    queues: list[asyncio.Queue[tuple[str, dict[str, str]] | None]] = [
        asyncio.Queue(maxsize=parallelism) for _ in range(parallelism)
    ]

    async def lane(queue: asyncio.Queue[tuple[str, dict[str, str]] | None]) -> None:
        while (item := await queue.get()) is not None:
            await handle(*item)

    workers = [asyncio.create_task(lane(q)) for q in queues]
    read = 0
    while read < total:
        for msg_id, fields in await _read(client, stream, parallelism):
            index = zlib.crc32(fields["order_id"].encode()) % parallelism
            await queues[index].put((msg_id, fields))  # a full lane: the loop stops reading
            read += 1
    for queue in queues:
        await queue.put(None)
    await asyncio.gather(*workers)
