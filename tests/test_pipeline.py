"""The pipeline: one path for every message; what happens when the charge itself cannot be written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
from billing_support import (
    charge_counts,
    hold_ledger_lock,
    pending_ids,
    produce,
    reaped,
    release_ledger_lock,
    running,
    settings,
    until,
)

from solutions.ledger import Ledger
from solutions.messages import Delivery
from solutions.pipeline import ALL_LANES, split_runs

BUSY_TIMEOUT_MS = 300  # the ledger's wait for another process's lock (30 s in production)


def _delivery(msg_id: str, order_id: bytes | None) -> Delivery:
    fields = {b"amount": b"1.00"} | ({b"order_id": order_id} if order_id is not None else {})
    return Delivery(msg_id, fields)


def test_a_batch_splits_into_runs_by_lane_in_stream_order() -> None:
    batch = [_delivery("1-0", b"a"), _delivery("2-0", b"b"), _delivery("3-0", None), _delivery("4-0", b"a"),
             _delivery("5-0", b"\xff")]  # no order_id, an undecodable one: each a run on no lane
    runs = [(lanes, [d.msg_id for d in run]) for lanes, run in split_runs(batch, instant=False, order_key="order_id")]
    assert runs == [([], ["3-0"]), ([], ["5-0"]), (["a"], ["1-0", "4-0"]), (["b"], ["2-0"])]


def test_an_instant_handler_takes_a_batch_as_one_run_and_no_key_means_no_lanes() -> None:
    batch = [_delivery("1-0", b"a"), _delivery("2-0", b"a")]
    assert [(lanes, len(run)) for lanes, run in split_runs(batch, instant=True, order_key="order_id")] == [
        ([ALL_LANES], 2)
    ]
    assert [lanes for lanes, _ in split_runs(batch, instant=False, order_key="")] == [[], []]
    assert list(split_runs([], instant=True, order_key="order_id")) == []


def dlq_event_ids(client: redis.Redis, stream: str) -> list[str]:
    return [fields["event_id"] for _, fields in client.xrange(f"{stream}:dlq")]


@pytest.mark.parametrize("dedupe", ["redis", "redis-2phase", "sqlite"])
def test_nothing_is_lost_while_another_process_holds_the_ledger_lock(
    dedupe: str, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The user's situation: another process holds the SQLite ledger past the busy timeout while
    events arrive. Every event must end up charged exactly once or dead-lettered (with ``redis``
    the marker set before the work used to survive the failed charge: the redelivery was acked
    as a duplicate and the event was lost)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe=dedupe, min_idle_ms=300,
                 claim_interval_ms=100, max_attempts=5)
    ledger = Ledger(s.ledger, busy_timeout_ms=BUSY_TIMEOUT_MS)
    n_before, n_locked = 10, 30

    async def scenario() -> None:
        async with running(s, ledger=ledger) as worker:
            produce(client, s.stream, n_before)
            await until(lambda: worker.counts.processed == n_before, 10, "the first charges")
            holder = await asyncio.to_thread(hold_ledger_lock, s.ledger)
            with reaped(holder):
                for i in range(n_locked):  # events keep arriving while the ledger is locked
                    produce(client, s.stream, 1, start=n_before + i)
                    await asyncio.sleep(0.03)
                # Held past several busy timeouts: charges fail and their messages are redelivered.
                await until(lambda: worker.counts.errors >= 3, 20, "charges failing on the lock")
                await asyncio.to_thread(release_ledger_lock, holder)
            await until(lambda: not pending_ids(client, s.stream, s.group), 30, "every event settled")

    asyncio.run(scenario())
    counts = charge_counts(s.ledger)
    dead = dlq_event_ids(client, s.stream)
    expected = {f"ev-{i}" for i in range(n_before + n_locked)}
    lost = expected - set(counts) - set(dead)
    assert not lost, f"{len(lost)} of {len(expected)} events lost with --dedupe {dedupe}: {sorted(lost)}"
    assert {event: n for event, n in counts.items() if n > 1} == {}, "an event was charged twice"
    assert not set(counts) & set(dead), "an event was both charged and dead-lettered"


def test_a_message_already_in_hand_is_not_started_twice(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    """The rescuer may reclaim what the reader just handed over: the second dispatch takes on nothing."""
    client = redis.Redis.from_url(redis_url)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", handler_delay_ms=300)
    (msg_id,) = produce(client, s.stream, 1)

    async def scenario() -> int:
        async with running(s) as worker:
            await until(lambda: msg_id in worker.pool.in_flight, 10, "the message in hand")
            assert worker.pipeline is not None
            fields = dict(client.xrange(s.stream)[0][1])
            again = await worker.pipeline.dispatch([Delivery(msg_id, fields, 2, "reclaimed")])
            await until(lambda: worker.counts.processed == 1, 10, "the charge")
            return again

    assert asyncio.run(scenario()) == 0
    assert charge_counts(s.ledger) == {"ev-0": 1}


@pytest.mark.parametrize("delay_ms", [0, 1], ids=["instant", "lanes"])
def test_a_failed_handler_leaves_no_marker_behind(
    delay_ms: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """``--dedupe redis``: every other attempt fails; each failure removes its marker, so every
    redelivery does the work and each event is charged exactly once."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe="redis", fail_every=2, max_attempts=10,
                 min_idle_ms=200, claim_interval_ms=100, handler_delay_ms=delay_ms)
    produce(client, s.stream, 20)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 20, 30, "every event charged")
            assert worker.counts.errors >= 10 and worker.counts.dedupe_skipped == 0

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {f"ev-{i}": 1 for i in range(20)}
    assert client.xlen(s.dlq_stream) == 0
