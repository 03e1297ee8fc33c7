"""labs.exercises.nb11: right and wrong answers against a run's rows (the rows' shape is what
labs.compare.scenarios returns; tests/test_compare_*.py check those on real brokers)."""

from __future__ import annotations

from typing import Any

import pytest

from labs.exercises.exercise import evaluate
from labs.exercises.notebook import find
from labs.panels.quizzes import brokers

pytestmark = pytest.mark.timeout(30)


def _rows(lost_nats: int = 0, rabbit_moved_by: str = "broker") -> list[dict[str, Any]]:
    rows = []
    for kind in ("redis", "redis+WAIT", "nats", "rabbitmq"):
        rows.append({"broker": kind, "case": "leader-kill", "lost": lost_nats if kind == "nats" else 0,
                     "server": "NATS 2.9.10" if kind == "nats" else kind, "fsync": "every 2 minutes"})
        rows.append({"broker": kind, "case": "poison", "poison_dead_lettered": True, "poison_attempts": 3,
                     "dead_lettered_by": rabbit_moved_by if kind == "rabbitmq" else "consumer"})
        rows.append({"broker": kind, "case": "consumer-kill", "charged_twice": 0, "duplicates_absorbed": 1})
        for window, rate in ((1, 100.0), (256, 900.0)):
            rows.append({"broker": kind, "case": f"window-{window}", "window": window, "publish_per_s": rate})
    return rows


@pytest.mark.parametrize(("answer", "passed", "says"), [
    ({"redis+WAIT", "nats", "rabbitmq"}, True, "best effort"),
    ({"redis", "redis+WAIT", "nats", "rabbitmq"}, False, "асинхронная"),
    ({"nats", "rabbitmq"}, False, "Выбрано не всё"),
    ("nats", False, "множество"),
])
def test_11_1_answers_back(answer: object, passed: bool, says: str) -> None:
    verdict = evaluate(find("11.1"), {"rows": _rows(), "no_loss_by_settings": answer})
    assert verdict.passed is passed and says in verdict.message
    assert "Верно" not in verdict.message  # the box already says «верно» (D12)
    assert "rabbitmq" not in verdict.message or passed  # a wrong answer does not name the missing row (D9)


def test_11_1_reads_the_run_a_measured_loss_contradicts_the_settings() -> None:
    verdict = evaluate(find("11.1"), {"rows": _rows(lost_nats=2), "no_loss_by_settings": {"redis+WAIT", "nats",
                                                                                          "rabbitmq"}})
    assert not verdict.passed and "потерял 2" in verdict.message


@pytest.mark.parametrize(("answer", "passed"), [({"rabbitmq"}, True), ({"rabbitmq", "nats"}, False),
                                                ({"redis"}, False)])
def test_11_2_answers_back(answer: set[str], passed: bool) -> None:
    assert evaluate(find("11.2"), {"rows": _rows(), "own_dlq": answer}).passed is passed


def test_11_2_reads_who_moved_the_message_a_consumer_move_is_not_the_brokers() -> None:
    verdict = evaluate(find("11.2"), {"rows": _rows(rabbit_moved_by="consumer"), "own_dlq": {"rabbitmq"}})
    assert not verdict.passed and "перенёс" in verdict.message


def test_a_blank_cell_is_one_clear_line() -> None:
    verdict = evaluate(find("11.1"), {"rows": _rows()})
    assert not verdict.passed and "no_loss_by_settings" in verdict.message


def test_the_quiz_keys_match_a_run_and_a_contradicting_run_is_caught() -> None:
    import os

    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])  # Quiz.verify cleans its key prefix there
    assert len(brokers.quiz(rows=_rows(), max_attempts=3).verify(client, key_prefix="x:")) == 4
    with pytest.raises(AssertionError):
        brokers.quiz(rows=_rows(lost_nats=1), max_attempts=3).verify(client, key_prefix="x:")
    client.close()
