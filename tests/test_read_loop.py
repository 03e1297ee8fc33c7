"""labs.experiments.read_loop: the read loop's traps, measured on real Redis."""

from __future__ import annotations

import pytest
import redis

from labs.experiments.read_loop import (
    block_past_socket_timeout,
    empty_block_read,
    entry_ids,
    fresh_group,
    stalled_read_delay_ms,
    work_held_at_crash,
)

pytestmark = pytest.mark.timeout(60)


def test_an_empty_block_read_returns_an_empty_reply_after_the_block(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    stream = f"{key_prefix}s"
    fresh_group(redis_client, stream)
    reply, elapsed_s = empty_block_read(redis_client, stream, block_ms=200)
    assert entry_ids(reply) == [] and not reply
    assert 0.15 <= elapsed_s < 2


def test_a_socket_timeout_shorter_than_block_raises_on_an_idle_read(redis_url: str, key_prefix: str) -> None:
    stream = f"{key_prefix}s"
    with redis.Redis.from_url(redis_url) as client:
        fresh_group(client, stream)
    assert block_past_socket_timeout(redis_url, stream, socket_timeout_s=0.3, block_ms=800) == "TimeoutError"
    assert block_past_socket_timeout(redis_url, stream, socket_timeout_s=1.5, block_ms=300) == "ok"


def test_handling_inside_the_loop_stalls_reading(redis_url: str, key_prefix: str) -> None:
    inline = stalled_read_delay_ms(redis_url, f"{key_prefix}a", work_ms=300, inline=True)
    offloaded = stalled_read_delay_ms(redis_url, f"{key_prefix}b", work_ms=300, inline=False)
    assert inline >= 200  # waited for the rest of the 300 ms handling
    assert offloaded < 150


def test_count_bounds_a_batch_not_the_work_in_hand(redis_url: str, key_prefix: str) -> None:
    ahead = work_held_at_crash(redis_url, f"{key_prefix}a", count=4, read_ahead=True, crash_after_handled=10)
    small = work_held_at_crash(redis_url, f"{key_prefix}b", count=4, read_ahead=False, crash_after_handled=10)
    large = work_held_at_crash(redis_url, f"{key_prefix}c", count=64, read_ahead=False, crash_after_handled=10)
    assert ahead.max_pel > 10 * ahead.count and ahead.held_at_crash > 10 * ahead.count
    assert (small.handled, small.held_at_crash, small.max_pel) == (10, 2, 4)  # 3rd batch of 4, 2 done
    assert (large.handled, large.held_at_crash, large.max_pel) == (10, 54, 64)  # 1st batch of 64, 10 done
