"""The harness itself: a Redis was found and exported, and keys stay under the test's prefix."""

from __future__ import annotations

import os

import redis


def test_redis_url_is_exported_for_notebook_kernels(redis_url: str) -> None:
    assert os.environ["REDIS_URL"] == redis_url
    assert os.environ["LAB_RUN_DIR"]


def test_key_prefix_is_unique_and_cleaned(redis_client: redis.Redis, key_prefix: str) -> None:
    redis_client.set(f"{key_prefix}a", "1")
    assert redis_client.get(f"{key_prefix}a") == "1"
    assert key_prefix.startswith("test:")
