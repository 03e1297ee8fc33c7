"""labs.experiments.claiming: a min idle below the handling time double-processes, a sane one does not."""

from __future__ import annotations

import pytest

from labs.experiments.claiming import (
    IDLE_MARGIN_MS,
    double_processing_run,
    min_idle_sweep,
    percentile,
    work_durations_ms,
)

pytestmark = pytest.mark.timeout(60)


def test_too_small_min_idle_double_processes_a_sequential_batch(redis_url: str, key_prefix: str) -> None:
    run = double_processing_run(redis_url, f"{key_prefix}small", min_idle_ms=20, entries=10, work_ms=40)
    assert run.processed_once_or_more == 10 and run.pending_left == 0  # nothing lost
    assert run.duplicates >= 5  # the later entries of the batch waited longer than 20 ms
    assert run.acks_that_found_nothing >= 1  # the owner's XACK found the rescuer had acked


def test_a_min_idle_above_the_longest_handling_makes_no_duplicates(redis_url: str, key_prefix: str) -> None:
    run = double_processing_run(redis_url, f"{key_prefix}sane", min_idle_ms=3000, entries=10, work_ms=20)
    assert (run.processed_once_or_more, run.processings, run.duplicates, run.pending_left) == (10, 10, 0, 0)
    assert run.as_dict()["min_idle_ms"] == 3000


def test_sweep_duplicates_fall_to_zero_above_the_longest_handling(redis_url: str, key_prefix: str) -> None:
    runs = min_idle_sweep(redis_url, key_prefix, [10, 400], entries=20, work_ms=30, jitter_ms=40)
    small, large = runs
    assert small.handler_p99_ms >= 30 and small.held_max_ms >= small.handler_p99_ms
    assert small.duplicates >= 15  # almost every handling outlived 10 ms
    assert large.min_idle_ms > large.held_max_ms + IDLE_MARGIN_MS  # a margin over the longest time in hand ...
    assert large.duplicates == 0 and large.pending_left == 0  # ... leaves the rescuer nothing to take


def test_percentile_and_seeded_durations() -> None:
    assert percentile([], 99) == 0.0
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5.0], 50) == 5.0
    first = work_durations_ms(5, 10, 20, seed=1)
    assert first == work_durations_ms(5, 10, 20, seed=1) and all(10 <= d <= 30 for d in first)
    assert work_durations_ms(3, 10, 0, seed=1) == [10, 10, 10]


def test_bad_arguments_are_refused(redis_url: str, key_prefix: str) -> None:
    with pytest.raises(ValueError):
        double_processing_run(redis_url, f"{key_prefix}x", min_idle_ms=10, entries=0)
