"""FailoverWatch: parsing ``+switch-master`` and dropping the pool's connections, blocked reads included.

The end-to-end case (a SIGSTOPped master under Sentinel) is in ``tests/test_failover.py``.
"""

from __future__ import annotations

import asyncio
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


@pytest.mark.timeout(30)
def test_a_switch_ends_a_blocked_read_at_once_and_is_acted_on_once(redis_url: str, key_prefix: str) -> None:
    asyncio.run(_switch_ends_a_blocked_read(redis_url, key_prefix))


async def _switch_ends_a_blocked_read(redis_url: str, key_prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url, socket_timeout=10, retry=None)
    watch = FailoverWatch(client, (("127.0.0.1", 1),), "mymaster")
    try:
        await client.ping()
        blocked = asyncio.ensure_future(client.xread({f"{key_prefix}none": "$"}, block=8000))
        await asyncio.sleep(0.2)  # let the XREAD reach the server and block there
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
