"""solutions.stream_ids: the one parser of an entry ID's milliseconds, on IDs Redis itself made."""

from __future__ import annotations

import time

import redis

from solutions.stream_ids import id_ms


def test_the_milliseconds_of_ids_redis_gave(redis_url: str, key_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    before_ms = int(time.time() * 1000)
    raw = client.xadd(f"{key_prefix}s", {"k": "v"})
    assert isinstance(raw, bytes)
    after_ms = int(time.time() * 1000)
    assert before_ms - 5 <= id_ms(raw) <= after_ms + 5  # bytes, as redis-py returns it
    assert id_ms(raw.decode()) == id_ms(raw)
    assert id_ms("1718000000123-4") == 1718000000123
