"""The pipeline: one path for every message.

What happens when the charge itself cannot be written (the ledger locked past its busy
timeout, a full disk, an I/O error, a read-only filesystem, a broken connection) is in
tests/test_store_outage.py, for every dedupe strategy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from billing_support import charge_counts, produce, running, settings, until

from solutions.charges import Charges
from solutions.handler import BillingHandler
from solutions.messages import Delivery, OrderEvent, flat_fields


def test_a_message_already_in_hand_is_not_started_twice(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    """The rescuer may reclaim what the reader just handed over: the second dispatch takes on nothing."""
    client = redis.Redis.from_url(redis_url)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", handler_delay_ms=300)
    (msg_id,) = produce(client, s.stream, 1)

    async def scenario() -> int:
        async with running(s) as worker:
            await until(lambda: msg_id in worker.pool.in_flight, 10, "the message in hand")
            assert worker.pipeline is not None
            fields = flat_fields(client.xrange(s.stream)[0][1])
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
            assert worker.counts.errors >= 10
            # A skip is not a failure's marker left behind: that event would never be charged (the ledger
            # below). It is a charged message reclaimed before its XACK landed (a clean-clone CI run: 2).

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {f"ev-{i}": 1 for i in range(20)}
    assert client.xlen(s.dlq_stream) == 0


class ShortChanging(BillingHandler):
    """A buggy handler: its run's charges miss the last event."""

    def charges(self, events: Sequence[OrderEvent], consumer: str) -> Charges:
        return super().charges(events[:-1], consumer)


def test_a_handler_that_makes_too_few_charges_charges_nothing_and_acks_nothing(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The ledger rows must match the run's events one to one: otherwise nothing is written and
    nothing acked; the run counts as a failed attempt and its messages stay pending."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe="sqlite", rescuer=False)
    produce(client, s.stream, 5)

    async def scenario() -> None:
        async with running(s, handler=ShortChanging(stream=s.stream, delay_ms=0)) as worker:
            await until(lambda: worker.counts.errors >= 5, 10, "the run failed")
            assert worker.counts.acked == 0 and worker.counts.processed == 0

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {}
    assert int(client.xpending(s.stream, "billing")["pending"]) == 5
