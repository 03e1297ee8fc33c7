"""One bounded snapshot of a stream and its group, against real Redis."""

from __future__ import annotations

import pytest
import redis

from labs.panels.streams_info import id_ms, read_stream_stats

pytestmark = pytest.mark.timeout(30)


def add_seconds_apart(client: redis.Redis, stream: str, n: int) -> list[str]:
    """``n`` entries with ids one second apart, the last one now: written in the same
    millisecond, "oldest" could not be told from "newest" by the age."""
    now_ms = int(client.time()[0]) * 1000
    ids = [f"{now_ms - (n - 1 - i) * 1000}-0" for i in range(n)]
    for i, entry_id in enumerate(ids):
        client.xadd(stream, {"i": i}, id=entry_id)
    return ids


def test_id_ms_takes_the_millisecond_part() -> None:
    assert id_ms("1712345678901-7") == 1712345678901
    assert id_ms(b"5-0") == 5


def test_snapshot_counts_pending_per_consumer_lag_and_age(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    first, *_, last = add_seconds_apart(redis_client, stream, 6)
    redis_client.xreadgroup("billing", "a", {stream: ">"}, count=1)
    redis_client.xreadgroup("billing", "b", {stream: ">"}, count=2)
    stats = read_stream_stats(redis_client, stream, "billing")
    assert stats.length == 6
    assert stats.pending_total == 3
    assert stats.pending_by_consumer == {"a": 1, "b": 2}
    assert stats.lag == 3
    assert stats.group_exists
    assert stats.stream_age_ms is not None
    assert stats.stream_age_ms == stats.server_ms - id_ms(first)  # the oldest entry's age ...
    assert stats.stream_age_ms >= 5000 + (stats.server_ms - id_ms(last))  # ... not the newest's


def test_consumers_are_capped_to_the_busiest(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "g", "0", mkstream=True)
    for i in range(6):
        redis_client.xadd(stream, {"i": i})
    for name, count in (("one", 1), ("two", 2), ("three", 3)):
        redis_client.xreadgroup("g", name, {stream: ">"}, count=count)
    stats = read_stream_stats(redis_client, stream, "g", max_consumers=2)
    assert stats.pending_by_consumer == {"three": 3, "two": 2}
    assert stats.pending_total == 6


def test_missing_group_is_empty_and_wrong_type_raises(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xadd(stream, {"i": 0})
    stats = read_stream_stats(redis_client, stream, "nobody")
    assert (stats.length, stats.pending_total, stats.lag, stats.group_exists) == (1, 0, None, False)
    redis_client.set(f"{key_prefix}str", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        read_stream_stats(redis_client, f"{key_prefix}str", "g")


def test_oldest_pending_age_comes_from_the_oldest_pel_entry(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "g", "0", mkstream=True)
    assert read_stream_stats(redis_client, stream, "g").oldest_pending_age_ms is None  # empty PEL
    first, second, third = add_seconds_apart(redis_client, stream, 3)
    redis_client.xreadgroup("g", "a", {stream: ">"}, count=3)
    stats = read_stream_stats(redis_client, stream, "g")
    assert stats.oldest_pending_age_ms == stats.server_ms - id_ms(first)
    redis_client.xack(stream, "g", first)  # the oldest pending entry is now the second one
    stats = read_stream_stats(redis_client, stream, "g")
    assert stats.oldest_pending_age_ms == stats.server_ms - id_ms(second)
    assert stats.oldest_pending_age_ms >= 1000 + (stats.server_ms - id_ms(third))  # not the newest's age
    redis_client.xack(stream, "g", second, third)
    assert read_stream_stats(redis_client, stream, "g").oldest_pending_age_ms is None
