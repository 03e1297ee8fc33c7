"""labs.exercises.nb06 on real Redis: the min idle curves, the rescuers' race, COUNT 1, the long store outage.

The runs behind these exercises take a second each and are timing-dependent; the student
edition's test runs the reference once. Here the run records are written by hand (streams of
the right length in Redis, records with chosen numbers), so each rule of a check is tested
deterministically.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, says, verdict

from labs.exercises.nb06 import zero_from
from labs.experiments.claiming import ClaimRun
from labs.experiments.locked_ledger import OutageRun
from labs.experiments.pool_and_dlq import PoolRun
from labs.experiments.rescuers import RaceRun
from solutions.metrics import Snapshot

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url)


def stream(ns: dict[str, Any], name: str, entries: int, *, pending: int = 0) -> None:
    key = ns["P"] + name
    ns["r"].delete(key)
    ns["r"].xgroup_create(key, "billing", id="0", mkstream=True)
    pipe = ns["r"].pipeline(transaction=False)
    for i in range(entries):
        pipe.xadd(key, {"i": i})
    pipe.execute()
    if pending:
        ns["r"].xreadgroup("billing", "x", {key: ">"}, count=pending)


def sweep(ns: dict[str, Any], prefix: str, dups: dict[int, int], p99: float = 100.0) -> list[ClaimRun]:
    runs = []
    for min_idle, duplicates in dups.items():
        stream(ns, f"{prefix}sweep:{min_idle}", 40)
        runs.append(ClaimRun(min_idle, 40, 40, 40 + duplicates, duplicates, duplicates, 0, 60, p99, p99 + 20, 0.3))
    return runs


def test_zero_from_is_where_the_duplicates_end_for_good() -> None:
    def runs(dups: dict[int, int]) -> list[ClaimRun]:
        return [ClaimRun(m, 40, 40, 40 + d, d, d, 0, 60, 90, 110, 0.3) for m, d in dups.items()]

    assert zero_from(runs({70: 30, 90: 0, 100: 3, 110: 0, 150: 0})) == 110  # a dip before the end does not count
    assert zero_from(runs({70: 30, 150: 2})) is None
    assert zero_from(runs({20: 0, 40: 0})) == 20


def test_the_fine_curve_judges_the_cut_off_and_the_p99_against_the_sweep(ns: dict[str, Any]) -> None:
    runs = sweep(ns, "ex:fine:", {70: 30, 90: 8, 100: 0, 110: 0, 150: 0}, p99=98.0)
    right = {**ns, "fine_sweep": runs, "fine_zero_from_ms": 100, "fine_p99_ms": 98.0}
    assert "Дубли кончаются на 100 мс при p99 обработки 98 мс" in passes("06.1", right)
    says("06.1", {**right, "fine_zero_from_ms": 90}, "`fine_zero_from_ms` не то")
    says("06.1", {**right, "fine_p99_ms": 40}, "`fine_p99_ms` не совпадает")
    says("06.1", {**right, "fine_sweep": runs[:1]}, "нет значений min idle из задания")
    says("06.1", {**right, "fine_sweep": ["70"]}, "список результатов")
    ns["r"].delete(ns["P"] + "ex:fine:sweep:110")
    says("06.1", right, 'Стрима `P + "ex:fine:sweep:110"` нет')


def test_the_flat_curve_says_when_the_series_never_ends(ns: dict[str, Any]) -> None:
    loaded = sweep(ns, "ex:flat:", {20: 40, 40: 40, 50: 39, 60: 38, 80: 20}, p99=82.0)
    assert "Дубли есть во всём ряду" in passes(
        "06.2", {**ns, "flat_sweep": loaded, "flat_zero_from_ms": None, "flat_p99_ms": 82.0}
    )
    calm = sweep(ns, "ex:flat:", {20: 40, 40: 38, 50: 0, 60: 0, 80: 0}, p99=41.0)
    assert "обрывается на 50 мс" in passes(
        "06.2", {**ns, "flat_sweep": calm, "flat_zero_from_ms": 50, "flat_p99_ms": 41.0}
    )


def race(ns: dict[str, Any], name: str, entries: int, stolen: int, *, lease: bool = False) -> RaceRun:
    stream(ns, name, entries)
    return RaceRun(3, lease, entries, entries + stolen, stolen, stolen, 0.5)


def test_the_rescuers_race_with_a_batch_of_one(ns: dict[str, Any]) -> None:
    right = {**ns, "race_one": race(ns, "ex:race:1", 30, 0), "race_slow": race(ns, "ex:race:slow", 9, 5)}
    assert "краж 0, дублей 0" in passes("06.3", right)
    says("06.3", {**right, "race_one": race(ns, "ex:race:1", 30, 12)}, "по-прежнему крадут")
    says("06.3", {**right, "race_slow": race(ns, "ex:race:slow", 9, 0)}, "краж нет")
    says("06.3", {**right, "race_one": race(ns, "ex:race:1", 30, 0, lease=True)}, "без аренды")
    says("06.3", {**right, "race_slow": RaceRun(3, False, 12, 17, 5, 5, 0.5)}, "не на стриме")
    stream(ns, "ex:race:1", 30, pending=3)
    says("06.3", right, "что-то осталось")


def pool(ns: dict[str, Any], count: int, drain_s: float) -> PoolRun:
    stream(ns, f"ex:count:{count}", 200)
    return PoolRun(count, 8, 200, 8 + count, drain_s, True)


def test_count_one_costs_a_read_per_entry(ns: dict[str, Any]) -> None:
    right = {**ns, "count_one": pool(ns, 1, 0.45), "count_sixteen": pool(ns, 16, 0.18),
             "reads_per_entry": {1: 1.01, 16: 0.07}}  # fmt: skip
    assert "`count=1`: 1.01 чтения на запись" in passes("06.4", right)
    says("06.4", {**right, "reads_per_entry": {1: 0.1, 16: 0.07}}, "около одного `XREADGROUP` на запись")
    says("06.4", {**right, "reads_per_entry": {1: 1.0, 16: 1.0}}, "в разы меньше")
    says("06.4", {**right, "reads_per_entry": {1: 1.0}}, "Ключи `reads_per_entry`")
    says("06.4", {**right, "count_one": right["count_sixteen"]}, "`count_one`: нужен законченный прогон")
    assert "пока не определены" in verdict("06.4", ns).message


def outage(ns: dict[str, Any], *, dead: int = 0, hold_s: float = 3.0) -> OutageRun:
    stream(ns, "ex:store", 45)
    log = ("business store down (locked: database is locked (SQLITE_BUSY)); ...",
           "business store back after 3.2s (7 probes, ...)")
    return OutageRun(sent=45, charged=45 - dead, charged_twice=0, dead_lettered=dead, pending_left=0, hold_s=hold_s,
                     max_attempts=2, min_idle_ms=100, pending_in_outage=4, max_delivered_in_outage=0,
                     unread_in_outage=36, first_charge_after_s=0.4, store_log=log, counts=Snapshot(),
                     finished=True)


def test_a_long_store_outage_is_judged_against_the_retry_budget(ns: dict[str, Any]) -> None:
    right = {**ns, "long_outage": outage(ns), "attempts_budget_s": 0.2, "budget_overrun": 15.0}
    lesson = passes("06.5", right)
    assert "в 15 раз длиннее бюджета попыток (0.2 с), а в DLQ 0 из 45" in lesson and "«down» — 1" in lesson
    says("06.5", {**right, "attempts_budget_s": 0.1}, "`attempts_budget_s` — за сколько секунд")
    says("06.5", {**right, "budget_overrun": 30}, "`budget_overrun` — во сколько раз")
    says("06.5", {**right, "long_outage": outage(ns, hold_s=2.0)}, "нужен законченный прогон")
    says("06.5", {**right, "long_outage": outage(ns, dead=3)}, "что-то не так с событиями")
    says("06.5", {**right, "long_outage": "run"}, "результатом `await locked_ledger_run(...)`")
    ns["r"].delete(ns["P"] + "ex:store")
    says("06.5", right, 'Стрима `P + "ex:store"` нет')
