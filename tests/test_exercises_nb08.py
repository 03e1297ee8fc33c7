"""labs.exercises.nb08 on real Redis: the sqlite dedupe, WAIT's unknown outcomes, the ack-first worker.

08.1 and 08.3 run the notebook's own cells (the reference ``charge_once`` and the ack-first
simulation); wrong dedupes are written here. 08.2's records are put in place by hand (the pair
of servers it needs runs once in the student edition's test).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, prepared, says, solved, verdict

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url)


def no_dedupe(db: sqlite3.Connection, event_id: str, amount: Any) -> bool:
    with db:
        db.execute("INSERT INTO charges (event_id, amount) VALUES (?, ?)", (event_id, amount))
    return True


def two_commits(db: sqlite3.Connection, event_id: str, amount: Any) -> bool:
    with db:
        fresh = db.execute("INSERT OR IGNORE INTO applied_events (event_id) VALUES (?)", (event_id,)).rowcount == 1
    if fresh:  # the marker is committed on its own: a charge that fails now leaves it behind
        with db:
            db.execute("INSERT INTO charges (event_id, amount) VALUES (?, ?)", (event_id, amount))
    return fresh


def always_true(db: sqlite3.Connection, event_id: str, amount: Any) -> bool:
    two_commits(db, event_id, amount if amount is not None else "0")
    return True


def test_the_sqlite_dedupe_passes_with_the_reference(ns: dict[str, Any]) -> None:
    prepared("08.1", ns)
    assert "`charge_once` пока не определена" in verdict("08.1", ns).message
    assert "Одно списание на событие" in passes("08.1", solved("08.1", ns))


@pytest.mark.parametrize(
    ("charge_once", "fragment"),
    [
        (no_dedupe, "Событие списано дважды"),
        (two_commits, "отметка «применено» осталась"),
        (always_true, "должна вернуть True, когда списала"),
        (lambda db, event_id, amount: 1 / 0, "`charge_once` упала на событии e-1: ZeroDivisionError"),
        ("charge", "должна быть функцией"),
    ],
)
def test_the_sqlite_dedupe_names_each_broken_one(charge_once: Any, fragment: str, ns: dict[str, Any]) -> None:
    says("08.1", {**prepared("08.1", ns), "charge_once": charge_once}, fragment)


def wait(ns: dict[str, Any], confirmed: list[str], unknown: list[str], missing: list[str]) -> dict[str, Any]:
    return {**ns, "confirmed_ids": confirmed, "unknown_ids": unknown, "missing_ids": missing}


def test_wait_turns_a_silent_loss_into_unknown_outcomes(ns: dict[str, Any]) -> None:
    linked, window = [f"1-{i}" for i in range(10)], [f"2-{i}" for i in range(5)]
    assert "Подтверждённых 10 — все на новом мастере" in passes("08.2", wait(ns, linked, window, window))
    says("08.2", wait(ns, linked, window, []), "Ничего не пропало")
    says("08.2", wait(ns, linked + window, [], window), "Нет записей с неизвестным исходом")
    says("08.2", wait(ns, [], linked + window, window), "Ни одной подтверждённой записи")
    says("08.2", wait(ns, linked[:8], linked[8:] + window, linked[:1] + window), "вернул 1")
    loaded = passes("08.2", wait(ns, linked[:8], linked[8:] + window, window))  # WAIT timed out on a live link
    assert "из 7 «неизвестных» пропали 5, а 2 всё-таки дошли" in loaded
    says("08.2", wait(ns, linked, window, ["9-9"]), "которых продюсер не отправлял")
    says("08.2", wait(ns, linked, linked[:1] + window, window), "и подтверждённой, и с неизвестным")


def test_an_empty_xpending_and_the_ledger(ns: dict[str, Any]) -> None:
    prepared("08.3", ns)
    assert "пока не определены" in verdict("08.3", ns).message
    assert "XPENDING пуст (0), а 4 подтверждённых" in passes("08.3", solved("08.3", ns))
    says("08.3", {**ns, "pel_now": 10}, "`pel_now` не совпадает")
    all_ids = [msg_id for msg_id, _ in ns["r"].xrange(ns["ackfirst_stream"])]
    says("08.3", {**ns, "acked_not_done": set(all_ids)}, "`acked_not_done` не то")
    says("08.3", {**ns, "acked_not_done": "none"}, "списком ID")
