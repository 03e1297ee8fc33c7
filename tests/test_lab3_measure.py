"""Lab 3's figures and conclusions from synthetic records (no Redis needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.lab3.conclusions import conclusions
from labs.lab3.contract import WorkerConfig, WorkerSpec, worker_argv, worker_env
from labs.lab3.measure import longest_gap, measure
from labs.lab3.record import CellRecord, ChargeRow, LogFacts, Sample, Send, read_logs
from labs.lab3.runner import Run
from labs.lab3.settings import PRESETS, Lab3Settings


def record(**changes: object) -> CellRecord:
    sends = [Send(f"e{i}", f"{i}-0", 100.0 + i, confirmed=i != 3) for i in range(1, 7)]
    charges = [ChargeRow(e, "1-0", "billing-1", 101.0 + i) for i, e in enumerate(["e1", "e2", "e2", "e3", "e6"])]
    values: dict[str, object] = {
        "sends": sends, "charges": charges, "dlq_events": ["e5"], "stream_events": {"e1", "e2", "e3", "e5", "e6"},
        "pending_end": 0, "pending_end_by_consumer": {}, "lag_end": 0,
        "samples": [Sample(100.0 + i, 2, 0) for i in range(20)], "logs": LogFacts(3, 3, 4, 3),
        "t0": 100.0, "produce_end": 110.0,
    }
    values.update(changes)
    return CellRecord(**values)  # type: ignore[arg-type]


def test_measure_counts_lost_duplicated_and_missing() -> None:
    res = measure("failover", "none", record(fault_t=104.5))
    assert (res.attempted, res.confirmed, res.unknown) == (6, 5, 1)
    assert res.lost == 1 and res.lost_ids == ["e4"]  # confirmed, neither charged nor in the DLQ
    assert res.duplicated == 1 and res.duplicate_ids == ["e2"]
    assert res.dead_lettered == 1 and res.unknown_but_charged == 1
    assert res.missing_on_new_master == 1 and res.missing_ids == ["e4"]
    assert res.lost_by_redis == 1  # e4 never reached the new master: no worker could charge it
    assert (res.reclaimed, res.redeliveries, res.drain_complete) == (3, 4, 3)
    assert res.recover_first_charge_s == pytest.approx(105.0 - 104.5)  # e6, sent at 106, charged at 105


def test_longest_gap_starts_at_the_last_point_before_the_fault() -> None:
    assert longest_gap([1.0, 2.0, 6.0, 6.5], start=3.0, end=7.0) == pytest.approx(4.0)
    assert longest_gap([], start=3.0, end=7.0) == pytest.approx(4.0)


def test_settings_validate_and_say_the_scale() -> None:
    assert PRESETS["full"].min_idle_scale == 40
    with pytest.raises(ValueError, match="fault_at_s"):
        Lab3Settings(produce_s=5.0, fault_at_s=6.0)
    with pytest.raises(ValueError, match="unknown strategy"):
        Lab3Settings(strategies=("mongo",))


def test_worker_contract_has_flags_and_environment(tmp_path: Path) -> None:
    config = WorkerConfig((("127.0.0.1", 26390), ("127.0.0.1", 26391)), "mymaster", "s", "billing", "billing-1",
                          tmp_path / "l.sqlite3", "sqlite")
    s = PRESETS["quick"]
    argv = worker_argv(WorkerSpec.from_text("./my-worker --verbose"), config, s)
    assert argv[:2] == ["./my-worker", "--verbose"]
    assert argv.count("--sentinel") == 2 and "--consumer" in argv and "--ledger" in argv
    assert worker_argv(WorkerSpec.from_text("./w", flags=False), config, s) == ["./w"]
    env = worker_env(config, s)
    assert env["BILLING_SENTINELS"] == "127.0.0.1:26390,127.0.0.1:26391"
    assert env["BILLING_CONSUMER"] == "billing-1" and env["BILLING_FAIL_EVERY"] == "7"


def test_read_logs_counts_reclaims_and_drains(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text(
        "x INFO reclaim: billing-1 took 1-0 from billing-2 (idle 3001 ms, delivery 2)\n"
        "x INFO metrics processed=5 reclaimed=1\n"
        "x INFO drain complete in 0.1s: processed=5 acked=5 errors=1 dead_lettered=0 reclaimed=1\n"
    )
    facts = read_logs([log, tmp_path / "missing.log"])
    assert (facts.reclaims, facts.drain_lines, facts.errors, facts.reclaimed) == (1, 1, 1, 1)


def test_conclusions_call_out_the_unexpected(tmp_path: Path) -> None:
    bad = measure("normal", "sqlite", record())
    runs = [Run(1, "normal", "sqlite", bad, record(), tmp_path)]
    text = " ".join(conclusions(runs, PRESETS["quick"]))
    assert "UNEXPECTED" in text and "normal/sqlite 1" in text


def test_repeated_cells_show_median_and_range() -> None:
    from labs.lab3.summary import _cell

    assert _cell([606, 602, 610]) == "606 [602..610]"
    assert _cell([0, 0, 0]) == 0 and _cell([None, None]) is None
    assert _cell([0.1, 0.13]) == "0.12 [0.10..0.13]"


def test_main_table_title_says_what_ran(tmp_path: Path) -> None:
    from labs.lab3.summary import main_table

    cell = measure("failover", "sqlite", record())
    runs = [Run(1, variant, strategy, cell, record(), tmp_path)
            for variant in ("failover", "failover+wait", "sigterm") for strategy in ("none", "sqlite")]
    assert main_table(runs).title == "Two modes x two dedupe strategies"  # failover+wait is failover's row
    one = [Run(1, "normal", "sqlite", cell, record(), tmp_path)]
    assert main_table(one).title == "One mode x one dedupe strategy"


def test_recovery_ranges_collapse_when_the_ends_agree() -> None:
    from labs.lab3.conclusions import _span

    assert _span([2.41, 2.38]) == "2.4"  # not "2.4-2.4"
    assert _span([2.6, 2.9, 2.7]) == "2.6-2.9"


def test_checks_of_modes_that_did_not_run_are_left_out(tmp_path: Path) -> None:
    from labs.lab3.checks import evaluate

    cell = measure("failover", "sqlite", record())
    runs = [Run(1, variant, "sqlite", cell, record(), tmp_path) for variant in ("failover", "failover+wait")]
    names = [check.name.split(":")[0] for check in evaluate(runs)]
    assert names == ["sqlite", "XPENDING empty and lag 0 at the end of every run", "failover"]
    assert not any("not run" in check.detail for check in evaluate(runs))
