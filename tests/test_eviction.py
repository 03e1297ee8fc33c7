"""labs.experiments.eviction: a stream under maxmemory loses its group and PEL, or XADD gets OOM."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.experiments.eviction import PRODUCER_WRITES, run_eviction

pytestmark = [pytest.mark.timeout(60)]


def test_allkeys_lru_evicts_the_whole_stream_with_its_group_and_pel(tmp_path: Path) -> None:
    result = run_eviction(tmp_path, "allkeys-lru")
    assert result.pending_before == 5
    assert result.cache_error == "" and result.evicted_keys > 0
    assert not result.stream_exists and result.pending_after is None  # the key, group and PEL are gone
    assert result.consumer_error.startswith("ResponseError: NOGROUP")
    assert result.producer_error == "" and result.producer_accepted == PRODUCER_WRITES
    assert result.groups_after_xadd == 0  # the producer's XADD made a new stream, with no group


def test_noeviction_refuses_the_producer_with_oom_and_keeps_the_queue(tmp_path: Path) -> None:
    result = run_eviction(tmp_path, "noeviction")
    assert result.evicted_keys == 0
    assert result.cache_error.startswith("OutOfMemoryError")
    assert result.producer_error.startswith("OutOfMemoryError")
    assert result.producer_accepted < PRODUCER_WRITES  # a few may slip in right at the limit, then OOM
    assert result.stream_exists and result.pending_after == result.pending_before == 5
    assert result.consumer_error == "" and result.groups_after_xadd == 1  # reading still works


def test_volatile_lru_spares_a_stream_without_ttl(tmp_path: Path) -> None:
    result = run_eviction(tmp_path, "volatile-lru", ttl_s=3600, max_keys=3000)
    assert result.cache_error == "" and result.evicted_keys > 0  # the cache made room for itself
    assert result.stream_exists and result.pending_after == 5
    assert result.consumer_error == "" and result.producer_error == ""


def test_an_lfu_policy_runs_too_though_redis_keeps_no_idle_time_under_it(tmp_path: Path) -> None:
    # OBJECT IDLETIME is an error under an LFU policy: the experiment must not ask for it there.
    result = run_eviction(tmp_path, "allkeys-lfu", max_keys=3000)
    assert result.cache_error == "" and result.evicted_keys > 0
    assert result.pending_before == 5
