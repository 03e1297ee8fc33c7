"""labs.exercises.nb10 on real Redis and Prometheus: prepared situations, then right and wrong answers.

The aof node of the shared ``monitored_stack`` plays the notebook's ``r``: Prometheus scrapes it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from monitoring_support import MonitoredStack

from labs.exercises import nb10
from labs.exercises.exercise import Verdict, evaluate
from labs.exercises.notebook import find

pytestmark = pytest.mark.timeout(90)

LAG = ("(max without (db) (redis_stream_last_generated_id) - on (instance, stream) group_right "
       "max without (db) (redis_stream_group_last_delivered_id)) / 1000")
NO_FALSE_ALARM = ("stream_group:lag_entries > 0 and on (instance, stream, group) "
                  "stream_group:consumer_idle_min_seconds > 2")


@pytest.fixture
def ns(monitored_stack: MonitoredStack) -> Iterator[dict[str, Any]]:
    client = redis.Redis.from_url(monitored_stack.aof.url, decode_responses=True)
    prefix = f"nb10-test:{secrets.token_hex(3)}:"
    try:
        yield {"r": client, "P": prefix, "prom": monitored_stack.mon.api}
    finally:
        with contextlib.suppress(redis.RedisError):
            keys = list(client.scan_iter(match=prefix + "*"))
            if keys:
                client.delete(*keys)
        client.close()


def _verdict(exercise_id: str, ns: dict[str, Any], **answer: Any) -> Verdict:
    return evaluate(find(exercise_id), {**ns, **answer})


def test_lag_in_seconds_from_the_ids(ns: dict[str, Any]) -> None:
    nb10.prepare_lag(ns["r"], ns["P"], behind_s=20)
    assert not _verdict("10.3", ns).passed  # the blank
    right = _verdict("10.3", ns, lag_query=LAG)
    assert right.passed and "20 с" in right.message, right.message
    in_ms = _verdict("10.3", ns, lag_query=LAG.removesuffix(" / 1000"))
    assert not in_ms.passed and "секундах" in in_ms.message
    ready_made = _verdict("10.3", ns, lag_query="stream_group:lag_seconds")
    assert not ready_made.passed and "без готового правила" in ready_made.message
    summed = "(sum(redis_stream_last_generated_id) - sum(redis_stream_group_last_delivered_id)) / 1000"
    no_labels = _verdict("10.3", ns, lag_query=summed)
    assert not no_labels.passed and "метк" in no_labels.message
    broken = _verdict("10.3", ns, lag_query="redis_stream_last_generated_id -")
    assert not broken.passed and "Prometheus не принял запрос" in broken.message


def test_heaviest_key_is_by_memory_usage_not_by_elements(ns: dict[str, Any]) -> None:
    keys = nb10.prepare_big(ns["r"], ns["P"])
    assert not _verdict("10.4", ns).passed  # the blank
    usage = {k: ns["r"].memory_usage(k, samples=0) for k in keys}
    assert _verdict("10.4", ns, heaviest=max(usage, key=usage.__getitem__)).passed
    most_elements = ns["P"] + "ex:big:list"  # what --bigkeys' counts would suggest
    wrong = _verdict("10.4", ns, heaviest=most_elements)
    assert not wrong.passed and "MEMORY USAGE" in wrong.message


def test_the_rule_pairs_idle_with_a_backlog(ns: dict[str, Any]) -> None:
    nb10.prepare_stuck_and_quiet(ns["r"], ns["P"])
    assert not _verdict("10.5", ns).passed  # the blank
    right = _verdict("10.5", ns, alert_expr=NO_FALSE_ALARM)
    assert right.passed, right.message
    naive = _verdict("10.5", ns, alert_expr="stream_group:consumer_idle_min_seconds > 2")
    assert not naive.passed and "тихий стрим" in naive.message
    blind = _verdict("10.5", ns, alert_expr="stream_group:lag_entries > 1000")
    assert not blind.passed and "Застрявшей группы" in blind.message
    backlog_only = _verdict("10.5", ns, alert_expr="stream_group:lag_entries > 0")
    assert not backlog_only.passed and "читает прямо сейчас" in backlog_only.message
