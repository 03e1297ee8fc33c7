"""Dead letters: poison input goes to <stream>:dlq at once with its reason; transient failures
after --max-attempts deliveries; each exactly once, and the worker stays up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
from billing_support import charge_counts, claim_rounds, pending_ids, produce, running, settings, until

POISON = {
    "missing-order": ({"type": "order.paid", "amount": "1.00", "event_id": "p1"}, "missing order_id"),
    "missing-amount": ({"type": "order.paid", "order_id": "o-1", "event_id": "p2"}, "missing amount"),
    "bad-amount": ({"type": "order.paid", "order_id": "o-1", "amount": "abc", "event_id": "p3"}, "not a decimal"),
    "negative": ({"type": "order.paid", "order_id": "o-1", "amount": "-3", "event_id": "p4"}, "not positive"),
    "bytes": ({"order_id": b"\xff\x00\xfe", "amount": "1", "event_id": "p5"}, "undecodable"),
    "type": ({"type": "order.cancelled", "order_id": "o-1", "amount": "1", "event_id": "p6"}, "unknown type"),
    "shape": ({"blob": "{\"order\": 1}"}, "unknown shape"),
}


def dlq_entries(client: redis.Redis, stream: str) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in client.xrange(f"{stream}:dlq")]


# delay 0: an instant handler, one run per read batch; 1 ms: one run per lane key. Both must agree.
PATHS = pytest.mark.parametrize("delay_ms", [0, 1], ids=["instant", "lanes"])


@PATHS
def test_each_poison_input_lands_in_the_dlq_once_with_its_reason(
    delay_ms: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", min_idle_ms=100, claim_interval_ms=100,
                 handler_delay_ms=delay_ms)
    ids = {name: client.xadd(s.stream, fields).decode() for name, (fields, _) in POISON.items()}

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: client.xlen(s.dlq_stream) >= len(POISON), 10, "every poison message in the DLQ")
            # Redis applies the dead-letter script before the worker has read its reply and counted it.
            await until(lambda: worker.counts.dead_lettered >= len(POISON), 5, "the worker to count them")
            produce(client, s.stream, 3)  # the worker is still up and charges good messages
            await until(lambda: worker.counts.processed == 3, 10, "the good messages")
            await claim_rounds(client, 3)  # several rescuer rounds: nothing is dead-lettered twice
            assert worker.counts.dead_lettered == len(POISON)
            assert client.xlen(s.dlq_stream) == len(POISON)

    asyncio.run(scenario())
    entries = dlq_entries(client, s.stream)
    assert len(entries) == len(POISON)
    by_id = {e[b"id"].decode(): e for e in entries}
    for name, (fields, reason) in POISON.items():
        entry = by_id[ids[name]]
        assert reason in entry[b"error"].decode(), (name, entry)
        assert entry[b"attempts"] == b"1"
        for field, value in fields.items():  # the original fields are kept as they were
            assert entry[field.encode()] == (value if isinstance(value, bytes) else value.encode())
    assert pending_ids(client, s.stream, s.group) == set()
    assert sum(charge_counts(s.ledger).values()) == 3


@PATHS
def test_transient_failure_goes_to_the_dlq_after_max_attempts_exactly_once(
    delay_ms: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", fail_every=1, max_attempts=3,
                 min_idle_ms=100, claim_interval_ms=100, handler_delay_ms=delay_ms)
    (msg_id,) = produce(client, s.stream, 1)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: client.xlen(s.dlq_stream) >= 1, 10, "the failing message in the DLQ")
            await until(lambda: worker.counts.dead_lettered >= 1, 5, "the worker to count it")
            await claim_rounds(client, 3)  # rounds that could reclaim it again: nothing more happens
            assert worker.counts.errors == 3
            assert worker.counts.dead_lettered == 1

    asyncio.run(scenario())
    (entry,) = dlq_entries(client, s.stream)
    assert entry[b"id"].decode() == msg_id
    assert entry[b"attempts"] == b"3"
    assert b"simulated failure" in entry[b"error"]
    assert entry[b"event_id"] == b"ev-0"
    assert pending_ids(client, s.stream, s.group) == set()
    assert charge_counts(s.ledger) == {}
