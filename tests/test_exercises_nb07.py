"""labs.exercises.nb07 on real Redis: the drain budget, a SIGKILL during the drain, a broken handler, visible lag.

The records the checks read — the group's PEL and lag, the worker's log file, its SQLite ledger —
are written here by hand, so every rule is tested without starting workers (the student edition's
test runs the reference with real workers once); 07.1 also runs the reference cell itself.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, says, solved, verdict

from labs.experiments.worker_procs import pending_ids

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str, tmp_path: Path) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url, RUN_DIR=tmp_path, pending_ids=pending_ids)


def stream(ns: dict[str, Any], name: str, entries: int, *, taken: int = 0) -> list[str]:
    """A stream with the group; ``taken`` entries delivered and left in the PEL. The ids in the PEL."""
    key = ns["P"] + name
    ns["r"].delete(key)
    ns["r"].xgroup_create(key, "billing", id="0", mkstream=True)
    for i in range(entries):
        ns["r"].xadd(key, {"event_id": f"ev-{i}"})
    if taken:
        ns["r"].xreadgroup("billing", "w", {key: ">"}, count=taken)
    return sorted(pending_ids(ns["r"], key))


def test_the_drain_budget_with_the_reference_worker(ns: dict[str, Any]) -> None:
    assert "пока не определены" in verdict("07.1", ns).message
    assert "С бюджетом 0,1 с воркер оставил в PEL 8 записей из 8" in passes("07.1", solved("07.1", ns))


def done(ns: dict[str, Any], name: str, entries: int) -> None:
    """A stream whose entries were all delivered and acked."""
    stream(ns, name, entries, taken=entries)
    key = ns["P"] + name
    ns["r"].xack(key, "billing", *pending_ids(ns["r"], key))


def test_the_drain_budget_names_each_mistake(ns: dict[str, Any]) -> None:
    held = stream(ns, "ex:drain:short", 8, taken=8)
    done(ns, "ex:drain:long", 8)
    passes("07.1", {**ns, "left_short": held, "left_long": []})
    says("07.1", {**ns, "left_short": held[:4], "left_long": []}, "не совпадает с PEL")
    says("07.1", {**ns, "left_short": held, "left_long": held[:1]}, "После длинного drain")
    stream(ns, "ex:drain:long", 8, taken=4)
    says("07.1", {**ns, "left_short": held, "left_long": []}, "раньше, чем прочитал все")
    done(ns, "ex:drain:long", 8)
    stream(ns, "ex:drain:short", 8)
    says("07.1", {**ns, "left_short": [], "left_long": []}, "не прочитал из")  # a blocking wait: it never ran
    done(ns, "ex:drain:short", 8)
    says("07.1", {**ns, "left_short": [], "left_long": []}, "После короткого drain PEL пуст")
    stream(ns, "ex:drain:short", 12, taken=12)  # what an earlier attempt left: not the task's 8
    says("07.1", {**ns, "left_short": [], "left_long": []}, "не 8 заказов")


def killed(ns: dict[str, Any], log: str, drain_line: Any = False) -> dict[str, Any]:
    held = stream(ns, "ex:killed", 8, taken=8)
    (ns["RUN_DIR"] / "w-killed.log").write_text(log)
    return {**ns, "killed_drain_line": drain_line, "killed_pending": set(held)}


def test_a_kill_during_the_drain_is_read_from_the_log_and_the_pel(ns: dict[str, Any]) -> None:
    sigterm = "INFO [w-killed] solutions.worker: received SIGTERM (pid 1): stop reading and drain\n"
    assert "списаний 0, а 8 записей по-прежнему в PEL" in passes("07.2", killed(ns, sigterm))
    says("07.2", killed(ns, ""), "нет `received SIGTERM`")
    says("07.2", killed(ns, sigterm + "drain complete processed=8 left_pending=0\n"), "успел написать `drain complete`")
    says("07.2", killed(ns, sigterm, "no"), "(bool)")
    says("07.2", {**killed(ns, sigterm), "killed_pending": set()}, "не совпадает с PEL")


def ledger(path: Path, event_ids: list[str]) -> None:
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE charges (event_id TEXT, msg_id TEXT, consumer TEXT, charged_at REAL)")
        db.executemany("INSERT INTO charges VALUES (?, '1-0', 'w', 0)", [(e,) for e in event_ids])


def test_a_broken_handler_still_adds_up(ns: dict[str, Any]) -> None:
    stream(ns, "ex:broken", 23)
    stream(ns, "ex:broken:dlq", 5)
    path = ns["RUN_DIR"] / "ex-broken.sqlite3"
    says("07.3", {**ns, "broken_charged": 18, "broken_dead": 5, "broken_twice": 0}, "Леджера")
    ledger(path, [f"ev-{i}" for i in range(18)])
    right = {**ns, "broken_charged": 18, "broken_dead": 5, "broken_twice": 0}
    assert "Списано 18, в DLQ 5 — вместе 23 из 23, дважды — 0" in passes("07.3", right)
    says("07.3", {**right, "broken_charged": 23}, "`broken_charged` не совпадает")
    says("07.3", {**right, "broken_dead": 0}, "`broken_dead` не совпадает")
    says("07.3", {**right, "broken_twice": 1}, "`broken_twice`")
    with closing(sqlite3.connect(path)) as db, db:  # a second run appended to the same ledger
        db.executemany("INSERT INTO charges VALUES (?, '2-0', 'w', 0)", [(f"ev-2-{i}",) for i in range(18)])
    says("07.3", {**right, "broken_charged": 36}, "больше, чем событий этой попытки")
    path.unlink()
    ledger(path, [f"ev-{i}" for i in range(18)])
    stream(ns, "ex:broken:dlq", 2)
    says("07.3", right, "Прогон не закончен")


def test_lag_that_grows_and_stays(ns: dict[str, Any]) -> None:
    stream(ns, "ex:lag", 200)  # nothing read: the group's lag is 200, all the producer wrote
    lag_ledger = ns["RUN_DIR"] / "ex-lag.sqlite3"
    right = {**ns, "lag_ledger": lag_ledger}
    growing = [5, 30, 60, 90, 120, 150]
    says("07.4", {**right, "lag_samples": growing}, "Леджера `lag_ledger` нет")
    ledger(lag_ledger, [])  # a worker that never ran while the producer wrote: no charges
    says("07.4", {**right, "lag_samples": growing}, "воркер почти ничего не списал")
    with closing(sqlite3.connect(lag_ledger)) as db, db:  # 40 charges while the producer wrote
        db.executemany("INSERT INTO charges VALUES (?, '1-0', 'w', 0)", [(f"ev-{i}",) for i in range(40)])
    assert "`lag` вырос с 5 до 150, хотя воркер работал (списал 40" in passes("07.4", {**right, "lag_samples": growing})
    says("07.4", {**right, "lag_samples": [0, 20, 40, 60, 80, 100, 120, 140, 160, 180]}, "так же быстро")
    says("07.4", {**right, "lag_samples": [0, 1, 0, 2, 1]}, "`lag` не растёт")
    says("07.4", {**right, "lag_samples": [5, 150, 90, 60, 40, 20]}, "`lag` не растёт")
    says("07.4", {**right, "lag_samples": [1, 2]}, "хотя бы 5 замеров")
    stream(ns, "ex:lag", 400, taken=300)  # the group was handed 300 of 400: its lag is 100 after the stop
    says("07.4", {**right, "lag_samples": [5, 30, 60, 90, 200, 250]}, "После остановки `lag` в Redis меньше")
