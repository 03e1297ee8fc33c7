"""labs.experiments.idempotency_cases: the course's marker measured case by case on real Redis."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import redis

from labs.experiments.idempotency_cases import (
    Case,
    CourseMarker,
    as_markdown,
    crash_between_marker_and_work,
    late_replay,
    marker_cases,
    marker_lost_in_failover,
    master_and_replica,
    natural_idempotency,
    producer_resend,
)

pytestmark = pytest.mark.timeout(60)


def test_a_ttl_covering_retention_catches_a_late_redelivery(redis_client: redis.Redis, key_prefix: str) -> None:
    assert late_replay(redis_client, f"{key_prefix}s", ttl_ms=2_000, replay_after_ms=200) == 1


def test_a_ttl_shorter_than_retention_lets_a_late_redelivery_through(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    assert late_replay(redis_client, f"{key_prefix}s", ttl_ms=50, replay_after_ms=200) == 2


def test_a_message_id_marker_misses_a_resend_and_an_event_id_marker_catches_it(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    assert producer_resend(redis_client, f"{key_prefix}a", key_on="msg_id") == 2
    assert producer_resend(redis_client, f"{key_prefix}b", key_on="event_id") == 1


def test_a_crash_between_marker_and_work_loses_the_work(redis_client: redis.Redis, key_prefix: str) -> None:
    assert crash_between_marker_and_work(redis_client, f"{key_prefix}s") == 0
    assert redis_client.xpending(f"{key_prefix}s", "billing")["pending"] == 0  # acked as "done"


def test_an_idempotent_effect_changes_the_state_once(redis_client: redis.Redis, key_prefix: str) -> None:
    assert natural_idempotency(redis_client, f"{key_prefix}s") == 1


def test_the_marker_sets_a_ttl_and_a_failed_work_drops_it(redis_client: redis.Redis, key_prefix: str) -> None:
    class Broken(Counter[str]):
        def __missing__(self, key: str) -> int:
            raise RuntimeError("the database is down")

    stream = f"{key_prefix}s"
    handler = CourseMarker(redis_client, Broken(), ttl_ms=5_000)
    key = handler.key(stream, "1-1", {"event_id": "e"})
    with pytest.raises(RuntimeError):
        handler.handle(stream, "1-1", {"event_id": "e"})
    assert not redis_client.exists(key)  # a retry will try again
    handler.effects = Counter()
    assert handler.handle(stream, "1-1", {"event_id": "e"}) == "done"
    assert 0 < redis_client.pttl(key) <= 5_000


@pytest.mark.failover
def test_a_marker_written_on_the_old_master_is_lost_in_the_failover(tmp_path: Path) -> None:
    with master_and_replica(tmp_path) as pair:
        assert marker_lost_in_failover(pair, "orders") == 2
    assert pair.master.pid() is None and pair.replica.pid() is None


@pytest.mark.failover
def test_marker_cases_make_the_table(redis_client: redis.Redis, key_prefix: str, tmp_path: Path) -> None:
    with master_and_replica(tmp_path) as pair:
        cases = marker_cases(redis_client, key_prefix, pair)
    assert [(c.number, c.effects, c.duplicates, c.lost) for c in cases] == [
        (1, 1, 0, 0), (2, 2, 1, 0), (3, 2, 1, 0), (4, 2, 1, 0), (5, 0, 0, 1), (8, 1, 0, 0)
    ]  # fmt: skip
    table = as_markdown([*cases, Case(6, "x", "y", "z", 1)])
    assert table.count("\n") == 8 and "| 6 | x |" in table
