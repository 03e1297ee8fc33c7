"""The pool: bounded concurrency, and per-key order (same order_id one at a time, in stream order)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import redis
from billing_support import CountingHandler, charges, produce, running, settings, until

from solutions.pool import Job, Pool, Turn


@pytest.mark.parametrize(("delay_ms", "jitter_ms"), [(1, 15), (0, 0)], ids=["lanes", "instant"])
def test_per_key_order_holds_at_parallelism_16(
    delay_ms: int, jitter_ms: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", parallelism=16, count=32,
                 handler_delay_ms=delay_ms, handler_jitter_ms=jitter_ms)
    ids = produce(client, s.stream, 400, orders=20)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 400, 30, "400 charges")

    asyncio.run(scenario())
    rows = charges(s.ledger)
    position = {msg_id: i for i, msg_id in enumerate(ids)}
    by_order: dict[str, list[int]] = {}
    for _, order_id, msg_id, _ in rows:
        by_order.setdefault(order_id, []).append(position[msg_id])
    assert len(by_order) == 20
    for order_id, seen in by_order.items():
        assert seen == sorted(seen), f"{order_id} charged out of stream order"
    if jitter_ms:  # and the orders really ran interleaved: the ledger is not simply in stream order
        assert [position[m] for _, _, m, _ in rows] != sorted(position[m] for _, _, m, _ in rows)


def test_concurrency_is_bounded_and_lanes_are_serial() -> None:
    async def scenario() -> tuple[int, dict[str, int]]:
        pool = Pool(4)
        running_now = peak = 0
        lane_busy: dict[str, int] = {}
        lane_peak: dict[str, int] = {}

        async def job(lane: str) -> None:
            nonlocal running_now, peak
            lane_busy[lane] = lane_busy.get(lane, 0) + 1
            lane_peak[lane] = max(lane_peak.get(lane, 0), lane_busy[lane])
            async with pool.slot():  # what a handler holds while it works
                running_now += 1
                peak = max(peak, running_now)
                await asyncio.sleep(random.uniform(0, 0.01))
                running_now -= 1
            await asyncio.sleep(0.001)  # the batched commit, outside the slot
            lane_busy[lane] -= 1

        def run(lane: str) -> Job:
            async def in_turn(turn: Turn) -> None:
                await turn.wait()
                await job(lane)

            return in_turn

        for i in range(60):
            lane = f"k{i % 12}"
            pool.start([f"id-{i}"], [lane], run(lane))
        assert len(pool) == 60
        assert await pool.drain(10) == []
        return peak, lane_peak

    peak, lane_peak = asyncio.run(scenario())
    assert peak == 4
    assert set(lane_peak.values()) == {1}


def test_parallelism_bounds_the_handlers_at_work(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", parallelism=4, count=16)
    handler = CountingHandler(s.stream)
    produce(client, s.stream, 60, orders=60)

    async def scenario() -> None:
        async with running(s, handler) as worker:
            await until(lambda: worker.counts.processed == 60, 15, "60 charges")

    asyncio.run(scenario())
    assert handler.peak == 4


@pytest.mark.parametrize("dedupe", ["none", "redis", "sqlite"])
def test_per_key_order_holds_across_overlapping_batches(
    dedupe: str, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """Runs of an instant handler overlap (the XACK of one with the work of the next), but their
    work and charges still follow stream order per order_id."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", parallelism=16, count=8, dedupe=dedupe)
    ids = produce(client, s.stream, 600, orders=3)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 600, 30, "600 charges")

    asyncio.run(scenario())
    position = {msg_id: i for i, msg_id in enumerate(ids)}
    by_order: dict[str, list[int]] = {}
    for _, order_id, msg_id, _ in charges(s.ledger):
        by_order.setdefault(order_id, []).append(position[msg_id])
    assert sum(map(len, by_order.values())) == 600
    for order_id, seen in by_order.items():
        assert seen == sorted(seen), f"{order_id} charged out of stream order"


def test_per_key_order_holds_when_a_batch_dead_letters_first(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    """A batch that waits on the DLQ before its work must not let the next batch overtake it."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", parallelism=16, count=8, dedupe="none")
    pipe = client.pipeline(transaction=False)
    for i in range(600):
        if i % 7 == 0:
            pipe.xadd(s.stream, {"type": "order.paid", "order_id": f"o-{i % 3}"})  # no amount: DLQ
        else:
            pipe.xadd(s.stream, {"type": "order.paid", "order_id": f"o-{i % 3}", "amount": "1.00", "event_id": f"e{i}"})
    ids = [str(r) for r in pipe.execute()]

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed + worker.counts.dead_lettered == 600, 30, "600 settled")

    asyncio.run(scenario())
    position = {msg_id: i for i, msg_id in enumerate(ids)}
    by_order: dict[str, list[int]] = {}
    for _, order_id, msg_id, _ in charges(s.ledger):
        by_order.setdefault(order_id, []).append(position[msg_id])
    assert sum(map(len, by_order.values())) == 600 - len(range(0, 600, 7))
    for order_id, seen in by_order.items():
        assert seen == sorted(seen), f"{order_id} charged out of stream order"


def test_a_reader_waiting_for_room_sees_the_stop_when_woken() -> None:
    """wait_below waits for one event: a run that ends, or wake() by whoever sets the stop."""

    async def scenario() -> bool:
        pool, stop = Pool(1), asyncio.Event()
        blocker = asyncio.Event()

        async def held(turn: Turn) -> None:
            await blocker.wait()

        pool.start(["id-0"], [], held)
        waiting = asyncio.create_task(pool.wait_below(1, stop))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # full: it waits
        stop.set()
        pool.wake()
        await asyncio.wait_for(waiting, 2)
        blocker.set()
        return await pool.drain(2) == []

    assert asyncio.run(scenario())
