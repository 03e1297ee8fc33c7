"""FailoverWatch: parsing ``+switch-master`` and dropping the pool's connections, blocked reads included.

The end-to-end case (a SIGSTOPped master under Sentinel) is in ``tests/test_failover.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from solutions.failover_watch import FailoverWatch, parse_switch


def test_parse_switch() -> None:
    assert parse_switch(b"mymaster 127.0.0.1 6380 127.0.0.1 6381") == (
        "mymaster", ("127.0.0.1", 6380), ("127.0.0.1", 6381)
    )
    assert parse_switch("mymaster 127.0.0.1 x 127.0.0.1 6381") is None
    assert parse_switch(b"garbage") is None


async def _until_blocked_in_xread(admin: aioredis.Redis, name: str, *, timeout_s: float) -> None:
    """Poll CLIENT LIST until the client called ``name`` is blocked (flag b) in its XREAD."""
    deadline = time.monotonic() + timeout_s
    while True:
        clients = await admin.client_list()
        if any(c.get("name") == name and "b" in c.get("flags", "") and c.get("cmd") == "xread" for c in clients):
            return
        assert time.monotonic() < deadline, f"the XREAD of {name} never blocked on the server: {clients}"
        await asyncio.sleep(0.02)


@pytest.mark.timeout(30)
def test_a_switch_ends_a_blocked_read_at_once_and_is_acted_on_once(redis_url: str, key_prefix: str) -> None:
    asyncio.run(_switch_ends_a_blocked_read(redis_url, key_prefix))


async def _switch_ends_a_blocked_read(redis_url: str, key_prefix: str) -> None:
    name = f"{key_prefix}reader".replace(":", "-")
    client = aioredis.Redis.from_url(redis_url, socket_timeout=10, retry=None, client_name=name)
    admin = aioredis.Redis.from_url(redis_url)
    watch = FailoverWatch(client, (("127.0.0.1", 1),), "mymaster")
    try:
        await client.ping()
        blocked = asyncio.ensure_future(client.xread({f"{key_prefix}none": "$"}, block=8000))
        await _until_blocked_in_xread(admin, name, timeout_s=5.0)
        assert not blocked.done()
        started = time.monotonic()
        message = {"type": "message", "data": b"mymaster 127.0.0.1 7000 127.0.0.1 7001"}
        assert await watch.on_message(message) is True
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(blocked, 5)
        assert time.monotonic() - started < 1.0
        assert await watch.on_message(message) is False  # the other sentinels announce the same switch
        assert await watch.on_message({"type": "message", "data": b"other 1.1.1.1 1 2.2.2.2 2"}) is False
        assert watch.switches == 1 and watch.current == ("127.0.0.1", 7001)
        assert await client.ping()  # the client reconnects by itself
    finally:
        await client.aclose()
        await admin.aclose()


@pytest.mark.timeout(30)
def test_an_unexpected_error_is_logged_at_warning_once_and_the_watch_goes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the listener (not a sentinel outage) is a WARNING the first time, DEBUG after; the watch retries."""
    calls = 0

    async def broken_listen(self: FailoverWatch, subscriber: object) -> None:
        nonlocal calls
        calls += 1
        raise ValueError(f"a bug, call {calls}")

    async def scenario() -> None:
        watch = FailoverWatch(aioredis.Redis(), (("127.0.0.1", 1),), "mymaster")
        monkeypatch.setattr(FailoverWatch, "_listen", broken_listen)
        task = asyncio.ensure_future(watch.run())
        deadline = time.monotonic() + 20
        while watch.unexpected_errors < 3:
            assert time.monotonic() < deadline and not task.done(), "the watch stopped retrying"
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.DEBUG, logger="solutions.failover_watch"):
        asyncio.run(scenario())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "unexpected error" in warnings[0].getMessage() and "call 1" in warnings[0].getMessage()
    assert sum("unexpected error again" in r.getMessage() for r in caplog.records) >= 2
