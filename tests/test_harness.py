"""The harness itself: a Redis was found and exported, and keys stay under the test's prefix."""

from __future__ import annotations

import os

import redis


def test_redis_url_is_exported_for_notebook_kernels(redis_url: str) -> None:
    assert os.environ["REDIS_URL"] == redis_url
    assert os.environ["LAB_RUN_DIR"]


_SEEN_PREFIXES: list[str] = []


def test_key_prefix_writes_under_its_own_prefix(redis_client: redis.Redis, key_prefix: str) -> None:
    redis_client.set(f"{key_prefix}a", "1")
    assert key_prefix.startswith("test:") and key_prefix.endswith(":")
    _SEEN_PREFIXES.append(key_prefix)


def test_key_prefix_is_unique_and_the_previous_tests_keys_are_gone(redis_client: redis.Redis, key_prefix: str) -> None:
    # Runs after the test above (pytest keeps file order): its fixture must have deleted its key.
    assert _SEEN_PREFIXES, "the test above did not run first"
    previous = _SEEN_PREFIXES[-1]
    assert key_prefix != previous
    assert list(redis_client.scan_iter(match=f"{previous}*")) == []
