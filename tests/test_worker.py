"""The worker as a whole: groups are independent, and the library runs inside an event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis
from billing_support import charge_counts, produce, running, settings, until

from solutions.site import StreamSite


def test_two_groups_on_one_stream_each_receive_every_event(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    billing = settings(redis_url, key_prefix, tmp_path / "billing.sqlite3", group="billing")
    audit = settings(redis_url, key_prefix, tmp_path / "audit.sqlite3", group="audit")
    produce(client, billing.stream, 50)

    async def scenario() -> None:
        async with running(billing) as w1, running(audit) as w2:
            produce(client, billing.stream, 50, start=50)
            await until(lambda: w1.counts.processed == 100 and w2.counts.processed == 100, 15, "both groups")

    asyncio.run(scenario())
    expected = {f"ev-{i}": 1 for i in range(100)}
    assert charge_counts(billing.ledger) == expected
    assert charge_counts(audit.ledger) == expected


def test_summary_and_gauges(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3")
    produce(client, s.stream, 10)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 10, 10, "ten charges")
            assert isinstance(worker.site, StreamSite) and worker.site.given is None  # its own client
            await worker.refresh_gauges(redis.asyncio.Redis.from_url(redis_url))
            assert worker.counts.stream_length == 10
            assert worker.counts.pending == 0 and worker.counts.group_lag == 0
            assert worker.counts.stream_age_s >= 0
        assert worker.summary is not None
        assert worker.summary.counts.processed == 10 and worker.summary.left_pending == []

    asyncio.run(scenario())


def test_left_pending_is_what_redis_holds_for_the_consumer_not_only_what_the_worker_saw(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """A batch Redis delivered to this consumer while the stop cancelled the read in flight sits in
    its PEL though the worker never saw it: the summary (and the drain line) must name it."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3")
    client.xgroup_create(s.stream, s.group, id="0", mkstream=True)

    async def scenario() -> list[str]:
        async with running(s) as worker:
            await until(lambda: worker.reader is not None and worker.reader.reads >= 2, 10, "a blocking read")
            with client.pipeline(transaction=True) as pipe:  # added and delivered in one step: the
                for i in range(3):                             # worker's blocked read never sees them
                    pipe.xadd(s.stream, {"type": "order.paid", "order_id": f"o-{i}", "amount": "1.00",
                                         "event_id": f"ev-{i}"})
                pipe.xreadgroup(s.group, s.consumer, {s.stream: ">"}, count=10)
                *ids, _ = pipe.execute()
            assert worker.counts.processed == 0
        assert worker.summary is not None
        assert worker.summary.left_pending == ids
        return ids

    ids = asyncio.run(scenario())
    assert [row["message_id"] for row in client.xpending_range(s.stream, s.group, "-", "+", 10)] == ids
