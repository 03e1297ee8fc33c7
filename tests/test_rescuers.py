"""labs.experiments.rescuers: the XAUTOCLAIM cursor, no ack after a failure, one rescuer per group."""

from __future__ import annotations

import pytest
import redis

from labs.experiments.rescuers import ack_after_failure, cursor_vs_restart, rescuers_race

pytestmark = pytest.mark.timeout(60)


def test_restarting_from_zero_never_reaches_idle_entries_behind_a_busy_head(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    run = cursor_vs_restart(redis_client, f"{key_prefix}s", busy_head=400, idle_tail=20, count=32, ticks=5)
    assert run.rescued_restarting == 0  # each call scans COUNT * 10 = 320 entries of the busy head
    assert run.rescued_with_cursor == 20


def test_the_course_rescuer_acks_failed_handlings_and_loses_them(redis_client: redis.Redis, key_prefix: str) -> None:
    course = ack_after_failure(redis_client, f"{key_prefix}a", course=True)
    fixed = ack_after_failure(redis_client, f"{key_prefix}b", course=False)
    assert course.failed_once == 3
    assert (course.done, course.acked_not_done, course.pending_left) == (6, 3, 0)
    assert (fixed.done, fixed.acked_not_done, fixed.pending_left) == (9, 0, 0)


def test_several_rescuers_steal_from_each_other_and_a_lease_stops_it(redis_url: str, key_prefix: str) -> None:
    many = rescuers_race(redis_url, f"{key_prefix}a", rescuers=3, lease=False)
    one = rescuers_race(redis_url, f"{key_prefix}b", rescuers=3, lease=True)
    assert many.stolen_from_rescuers > 0 and many.duplicates > 0
    assert (one.stolen_from_rescuers, one.duplicates, one.processings) == (0, 0, 30)
