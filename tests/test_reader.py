"""The read loop: own pending first, NOGROUP recovered without a hot loop, errors backed off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from billing_support import charge_counts, pending_ids, produce, running, settings, until, xreadgroup_calls

from labs.launcher.topology import Topology
from solutions.reader import NEW, OWN_PENDING, Entry, xreadgroup_entries

# BLOCK is 200 ms in these tests, so a healthy idle reader makes ~5 calls a second; the
# backoff caps errors at a few a second. A hot loop would make thousands.
MAX_CALLS_PER_S = 15


def test_own_pending_entries_are_read_first(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", consumer="billing-1", rescuer=False)
    client.xgroup_create(s.stream, s.group, id="0", mkstream=True)
    produce(client, s.stream, 3)
    client.xreadgroup(s.group, "billing-1", {s.stream: ">"}, count=10)  # an earlier life read them, then died

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 3, 10, "the old pending entries")

    asyncio.run(scenario())
    assert pending_ids(client, s.stream, s.group) == set()
    assert set(charge_counts(s.ledger)) == {"ev-0", "ev-1", "ev-2"}


def _calls_during(seconds: float, count: Callable[[], int]) -> float:
    """Calls per second over a window: a measurement, not a wait (under load it only drops)."""
    before = count()
    time.sleep(seconds)
    return (count() - before) / seconds


def test_nogroup_after_the_stream_is_deleted_is_recovered_without_a_hot_loop(
    topology_factory: Callable[..., Topology], tmp_path: Path
) -> None:
    topo = topology_factory("single")
    client = redis.Redis.from_url(topo.url, decode_responses=True)
    s = settings(topo.url, "nogroup:", tmp_path / "l.sqlite3")

    async def scenario() -> None:
        async with running(s) as worker:
            produce(client, s.stream, 5)
            await until(lambda: worker.counts.processed == 5, 10, "the first five")
            errors_before = worker.reader.errors if worker.reader else 0
            client.delete(s.stream)
            await until(lambda: worker.reader is not None and worker.reader.errors > errors_before, 10,
                        "the reader to meet NOGROUP")
            rate = await asyncio.to_thread(_calls_during, 1.5, lambda: xreadgroup_calls(client))
            assert rate <= MAX_CALLS_PER_S, f"{rate:.0f} XREADGROUP calls/s: a hot loop"
            await until(lambda: client.exists(s.stream), 5, "the group recreated (MKSTREAM)")
            produce(client, s.stream, 5, start=5)
            await until(lambda: worker.counts.processed == 10, 10, "the next five after recovery")

    asyncio.run(scenario())
    assert len(charge_counts(s.ledger)) == 10


@pytest.mark.slow
def test_redis_restarted_empty_is_recovered_without_a_hot_loop(
    topology_factory: Callable[..., Topology], tmp_path: Path
) -> None:
    topo = topology_factory("single")
    client = redis.Redis.from_url(topo.url, decode_responses=True)
    s = settings(topo.url, "restart:", tmp_path / "l.sqlite3")

    async def scenario() -> None:
        async with running(s) as worker:
            assert worker.reader is not None
            produce(client, s.stream, 5)
            await until(lambda: worker.counts.processed == 5, 10, "the first five")
            await asyncio.to_thread(topo.kill)
            reader = worker.reader
            await until(lambda: reader.errors >= 1, 10, "the reader to notice Redis is gone")
            rate = await asyncio.to_thread(_calls_during, 1.5, lambda: reader.reads)
            assert rate <= MAX_CALLS_PER_S, f"{rate:.0f} read attempts/s while Redis is down"
            await asyncio.to_thread(topo.ensure)  # no persistence: it comes back empty
            await until(lambda: _exists(client, s.stream), 10, "the group recreated after the restart")
            rate = await asyncio.to_thread(_calls_during, 1.0, lambda: xreadgroup_calls(client))
            assert rate <= MAX_CALLS_PER_S, f"{rate:.0f} XREADGROUP calls/s after the restart"
            produce(client, s.stream, 5, start=5)
            await until(lambda: worker.counts.processed == 10, 10, "charges after the restart")

    asyncio.run(scenario())
    assert len(charge_counts(s.ledger)) == 10


def _exists(client: redis.Redis, key: str) -> bool:
    try:
        return bool(client.exists(key))
    except redis.ConnectionError:
        return False


class RoutedClient:
    """A client that is not a ``redis.asyncio.Redis`` (as a cluster client is not): only its
    ``xreadgroup`` is used, here a real one's."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.inner = client

    async def xreadgroup(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.xreadgroup(*args, **kwargs)


@pytest.mark.parametrize("protocol", [2, 3])
def test_entries_come_as_redis_sent_them(protocol: int, redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    """The raw reply (RESP2 or RESP3) and the parsed one of another kind of client give the same
    entries: ids as bytes, fields as the flat list the producer wrote, in its order; an entry
    deleted while pending comes with no fields."""
    client = redis.Redis.from_url(redis_url)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", consumer="c-1", count=10)
    client.xgroup_create(s.stream, s.group, id="0", mkstream=True)
    client.xadd(s.stream, {"type": "order.paid", "order_id": "o-1", "amount": "1.50", "event_id": "e-1"})
    gone = client.xadd(s.stream, {"b": "2", "a": "1"})

    async def read() -> list[list[Entry]]:
        async with aioredis.Redis.from_url(redis_url, protocol=protocol) as aclient:
            new = await xreadgroup_entries(aclient, s, NEW, None)
            client.xdel(s.stream, gone)
            return [new, await xreadgroup_entries(aclient, s, OWN_PENDING, None),
                    await xreadgroup_entries(RoutedClient(aclient), s, OWN_PENDING, None)]  # type: ignore[arg-type]  # not a Redis: the xreadgroup path

    new, own, routed = asyncio.run(read())
    fields = [b"type", b"order.paid", b"order_id", b"o-1", b"amount", b"1.50", b"event_id", b"e-1"]
    assert [(bytes(i), list(f) if f else f) for i, f in new] == [(new[0][0], fields), (gone, [b"b", b"2", b"a", b"1"])]
    assert [list(f) if f else None for _, f in own] == [fields, None] == [list(f) if f else None for _, f in routed]
