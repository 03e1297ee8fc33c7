"""Idempotency strategies: duplicates, and a process that dies between marking and doing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis
from billing_support import ROOT, charge_counts, pending_ids, running, settings, until

DOOMED = textwrap.dedent(
    """
    import asyncio, os, sys
    from solutions.handler import BillingHandler
    from solutions.settings import Settings
    from solutions.worker import Worker

    class DiesBetweenMarkAndWork(BillingHandler):
        async def process(self, event):
            os._exit(17)  # the dedupe mark is set, the charge never happens

    url, stream, dedupe, ledger = sys.argv[1:5]
    s = Settings(redis_url=url, stream=stream, dedupe=dedupe, ledger=ledger, consumer="doomed",
                 block_ms=200, min_idle_ms=500, claim_interval_ms=100)
    asyncio.run(Worker(s, handler=DiesBetweenMarkAndWork(stream=stream, delay_ms=0)).run())
    """
)


def add_event(client: redis.Redis, stream: str, event_id: str = "ev-1") -> str:
    fields = {"type": "order.paid", "order_id": "o-1", "amount": "5.00", "event_id": event_id}
    return str(client.xadd(stream, fields))


@pytest.mark.parametrize(("dedupe", "charged"), [("redis", 0), ("redis-2phase", 1)])
def test_death_between_mark_and_work(
    dedupe: str, charged: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The course's marker loses the event (0 charges); the two-phase lease does not (1)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe=dedupe, consumer="survivor",
                 min_idle_ms=500, claim_interval_ms=100)
    add_event(client, s.stream)
    script = tmp_path / "doomed.py"
    script.write_text(DOOMED)
    done = subprocess.run([sys.executable, str(script), redis_url, s.stream, dedupe, str(s.ledger)],
                          cwd=ROOT, timeout=30, capture_output=True)
    assert done.returncode == 17, done.stderr.decode()[-2000:]
    assert pending_ids(client, s.stream, s.group), "the doomed worker died holding the message"

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: not pending_ids(client, s.stream, s.group), 15, "the message to be settled")
            if dedupe == "redis":
                assert worker.counts.dedupe_skipped == 1  # the stale marker made it look done

    asyncio.run(scenario())
    assert sum(charge_counts(s.ledger).values()) == charged
    assert client.xlen(s.dlq_stream) == 0


@pytest.mark.parametrize("delay_ms", [0, 1], ids=["batch", "per-message"])
@pytest.mark.parametrize(("dedupe", "charged"), [("none", 2), ("redis", 1), ("redis-2phase", 1), ("sqlite", 1)])
def test_a_duplicate_event_is_charged_per_strategy(
    dedupe: str, charged: int, delay_ms: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The same event_id sent twice: only ``none`` charges it twice."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe=dedupe, handler_delay_ms=delay_ms)
    add_event(client, s.stream)
    add_event(client, s.stream)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.acked == 2, 10, "both deliveries acked")
            assert worker.counts.dedupe_skipped == 2 - charged

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {"ev-1": charged}


def test_sqlite_writes_applied_events_in_the_same_transaction(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    import sqlite3

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe="sqlite")
    msg_id = add_event(client, s.stream, "ev-9")
    no_event_id = str(client.xadd(s.stream, {"type": "order.paid", "order_id": "o-2", "amount": "1.5"}))

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 2, 10, "two charges")

    asyncio.run(scenario())
    with sqlite3.connect(s.ledger) as db:
        applied = dict(db.execute("SELECT event_id, msg_id FROM applied_events").fetchall())
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        columns = [r[1] for r in db.execute("PRAGMA table_info(charges)").fetchall()]
    assert applied == {"ev-9": msg_id, f"{s.stream}:{no_event_id}": no_event_id}
    assert mode == "wal"
    assert {"event_id", "order_id", "amount", "msg_id", "consumer", "charged_at"} <= set(columns)
