"""XADD latency: percentiles, the server's usec_per_call, and redis-py's maxlen=0 trap."""

from __future__ import annotations

import math

import pytest
import redis

from labs.experiments.latency import (
    case_label,
    maxlen_zero_lengths,
    percentile,
    server_usec_per_call,
    xadd_latency,
)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile(values, 100) == 1000
    assert math.isnan(percentile([], 50))


def test_case_labels_spell_the_command() -> None:
    assert case_label(None, False) == "no MAXLEN"
    assert case_label(10_000, True) == "MAXLEN ~ 10000"
    assert case_label(10_000, False) == "MAXLEN = 10000"


def test_redis_py_maxlen_zero_empties_the_stream(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}trap"
    for i in range(5):
        redis_client.xadd(stream, {"i": i})
    redis_client.xadd(stream, {"i": 5}, maxlen=0)  # go-redis: no limit; redis-py: MAXLEN ~ 0
    assert redis_client.xlen(stream) == 0


def test_redis_py_maxlen_zero_trims_a_long_stream_by_ten_thousand_per_call(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    assert redis_client.config_get("stream-node-max-entries")["stream-node-max-entries"] == "100"
    stream = f"{key_prefix}long"
    # MAXLEN ~ 0: whole nodes only, and LIMIT's default of 100 x 100 entries per call
    assert maxlen_zero_lengths(redis_client, stream, entries=25_000, calls=3, raw=False) == [25_000, 15_001, 5_002, 0]
    # MAXLEN 0 (exact): empty at once, the new entry included
    assert maxlen_zero_lengths(redis_client, stream, entries=25_000, calls=1, raw=True) == [25_000, 0]
    assert redis_client.exists(stream) == 0


def test_maxlen_zero_is_refused(redis_url: str, key_prefix: str) -> None:
    with pytest.raises(ValueError, match="maxlen=0"):
        xadd_latency(redis_url, stream=f"{key_prefix}s", n=10, maxlen=0, approximate=True)


@pytest.mark.parametrize(("maxlen", "approximate"), [(None, False), (500, True), (500, False)])
def test_xadd_latency_measures_and_cleans_up(
    redis_url: str, redis_client: redis.Redis, key_prefix: str, maxlen: int | None, approximate: bool
) -> None:
    stream = f"{key_prefix}lat"
    stats = xadd_latency(redis_url, stream=stream, n=300, maxlen=maxlen, approximate=approximate)
    assert stats.n == 300
    assert 0 < stats.p50_us <= stats.p99_us <= stats.p999_us
    assert stats.server_usec_per_call > 0
    assert redis_client.exists(stream) == 0


def test_server_usec_per_call_is_zero_for_an_unused_command(redis_client: redis.Redis) -> None:
    assert server_usec_per_call(redis_client, "no-such-command") == 0.0
