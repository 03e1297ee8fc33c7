"""Idempotency strategies: duplicates, and a process that dies between marking and doing."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from billing_support import ROOT, charge_counts, pending_ids, running, settings, until, wait_until
from redis.backoff import NoBackoff
from redis.retry import Retry

from labs.launcher.topology import Topology
from solutions.acks import Acks
from solutions.idempotency import Deps, RedisMarker, Verdict
from solutions.ledger import Ledger
from solutions.messages import OrderEvent

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
            if dedupe == "redis":  # counted once the XACK's reply is read, a moment after the PEL empties
                await until(lambda: worker.counts.dedupe_skipped >= 1, 5, "the duplicate to be counted")
                assert worker.counts.dedupe_skipped == 1  # the stale marker made it look done

    asyncio.run(scenario())
    assert sum(charge_counts(s.ledger).values()) == charged
    assert client.xlen(s.dlq_stream) == 0


@pytest.mark.parametrize("delay_ms", [0, 1], ids=["instant", "lanes"])
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
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", dedupe="sqlite")
    msg_id = add_event(client, s.stream, "ev-9")
    no_event_id = str(client.xadd(s.stream, {"type": "order.paid", "order_id": "o-2", "amount": "1.5"}))

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 2, 10, "two charges")

    asyncio.run(scenario())
    with sqlite3.connect(s.ledger) as db:
        claims = "SELECT event_id, msg_id FROM applied_events JOIN charges USING (event_id)"  # the charge's msg_id
        applied = dict(db.execute(claims).fetchall())
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        columns = [r[1] for r in db.execute("PRAGMA table_info(charges)").fetchall()]
    assert applied == {"ev-9": msg_id, f"{s.stream}:{no_event_id}": no_event_id}
    assert mode == "wal"
    assert {"event_id", "order_id", "amount", "msg_id", "consumer", "charged_at"} <= set(columns)


def test_a_marker_whose_del_failed_is_deleted_before_the_next_batch(
    topology_factory: Callable[..., Topology], tmp_path: Path
) -> None:
    """``--dedupe redis``: the work fails while Redis is down, so the marker's DEL fails too.

    Redis comes back with the marker (AOF here; a promoted replica in lab 3's failover), and
    left alone it makes the event's redelivery look done: a lost event, as lab 3 measured. The
    strategy remembers the DEL it owes and pays it first thing in its next batch.
    """
    topo = topology_factory("aof")
    event, other = order_event("ev-down"), order_event("ev-other")

    async def scenario() -> None:
        ours, theirs = marker_strategy(topo.url, tmp_path / "a"), marker_strategy(topo.url, tmp_path / "b")
        assert await ours.begin([event]) == [Verdict.PROCEED]
        # The work fails because Redis went away, and so does the DEL of its marker.
        with redis_down(topo), pytest.raises(redis.ConnectionError):
            await ours.abort([event])
        assert ours.owed == {"dedupe:ev-down"}
        # Another worker that rescued the message now would take it for a duplicate: the danger.
        assert await theirs.begin([event]) == [Verdict.DUPLICATE]
        # Our next batch, of any event, deletes the owed marker first ...
        assert await ours.begin([other]) == [Verdict.PROCEED]
        assert ours.owed == set()
        # ... so the redelivery proceeds, wherever it lands.
        assert await theirs.begin([event]) == [Verdict.PROCEED]

    asyncio.run(scenario())


def order_event(event_id: str) -> OrderEvent:
    return OrderEvent(msg_id="1-0", order_id="o-1", amount=Decimal("5.00"), event_id=event_id,
                      type="order.paid", dedupe_key=event_id)


@contextlib.contextmanager
def redis_down(topo: Topology) -> Iterator[None]:
    """kill -9 of the server (its AOF keeps what it acknowledged), then start it again."""
    server = topo.servers[0]
    server.kill(signal.SIGKILL)
    wait_until(lambda: not server.ping(), 10, "the server to be gone")
    try:
        yield
    finally:
        topo.ensure()


def marker_strategy(url: str, home: Path) -> RedisMarker:
    """A ``redis`` strategy on its own client with a short timeout and no retries (a dead Redis fails fast)."""
    client = aioredis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    home.mkdir()
    deps = Deps(client=client, acks=Acks(client, "orders", "billing"), ledger=Ledger(home / "ledger.sqlite3"),
                key_prefix="dedupe:", ttl_s=60, lease_ms=1000, consumer=home.name)
    return RedisMarker(deps)
