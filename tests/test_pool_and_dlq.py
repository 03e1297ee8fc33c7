"""labs.experiments.pool_and_dlq: the reference worker's bounded pool, retries and dead letters."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labs.experiments.pool_and_dlq import POISON, dlq_run, pool_run

pytestmark = pytest.mark.timeout(90)


def test_the_pel_stays_bounded_by_count_and_parallelism(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    narrow = asyncio.run(pool_run(redis_url, f"{key_prefix}a", tmp_path / "a.db", count=4, parallelism=2, entries=60))
    wide = asyncio.run(pool_run(redis_url, f"{key_prefix}b", tmp_path / "b.db", count=4, parallelism=8, entries=60))
    for run in (narrow, wide):
        assert run.finished
        assert run.parallelism <= run.max_pending <= run.parallelism + 2 * run.count  # the rest waits in the stream
    assert wide.drain_s < narrow.drain_s


def test_transient_failures_go_to_the_dlq_after_max_attempts_and_poison_at_once(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    run = asyncio.run(dlq_run(redis_url, f"{key_prefix}s", tmp_path / "l.db", good=4, fail_every=1, max_attempts=3))
    assert run.finished and run.pending_left == 0 and run.charged == 0
    by_id = {d.original_id: d for d in run.dead}
    assert len(run.dead) == 4 + len(POISON)
    for msg_id in run.poison_ids.values():
        assert by_id[msg_id].attempts == 1 and by_id[msg_id].error.startswith("permanent")
    others = [d for d in run.dead if d.original_id not in run.poison_ids.values()]
    assert all(d.attempts == 3 and "simulated failure" in d.error for d in others)


def test_retries_heal_transient_failures(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    run = asyncio.run(dlq_run(redis_url, f"{key_prefix}s", tmp_path / "l.db", good=9, fail_every=3, max_attempts=5))
    assert run.finished and run.charged == 9 and run.counts.errors > 0
    assert {d.original_id for d in run.dead} == set(run.poison_ids.values())
