"""labs.experiments.ordering: a plain pool reorders events of one key; lanes by key hash keep the order."""

from __future__ import annotations

import asyncio

import pytest
import redis

from labs.experiments.ordering import delivery_order, ordering_run, violations

pytestmark = pytest.mark.timeout(60)


def test_violations_counts_events_applied_after_a_later_one() -> None:
    assert violations([0, 1, 2, 3]) == 0
    assert violations([1, 0, 2, 3]) == 1
    assert violations([3, 2, 1, 0]) == 3
    assert violations([]) == 0


def test_a_pool_without_lanes_breaks_per_key_order_and_lanes_keep_it(redis_url: str, key_prefix: str) -> None:
    plain = asyncio.run(ordering_run(redis_url, f"{key_prefix}a", lanes=False))
    laned = asyncio.run(ordering_run(redis_url, f"{key_prefix}b", lanes=True))
    assert plain.events == laned.events == 100
    assert plain.violations > 0 and plain.keys_out_of_order >= 2
    assert laned.violations == 0


def test_a_group_hands_out_by_id_and_a_redelivery_breaks_the_order(redis_client: redis.Redis, key_prefix: str) -> None:
    ids, handed_out = delivery_order(redis_client, f"{key_prefix}order")
    assert handed_out[:4] == ids[:4]  # strictly by id, across consumers a and b
    assert handed_out[4] == ids[0] and handed_out[5] == ids[4]  # the reclaimed entry comes after newer ones
    assert redis_client.exists(f"{key_prefix}order") == 0
