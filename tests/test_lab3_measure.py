"""Lab 3's figures, checks and conclusions from synthetic records (no Redis needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from labs.lab3.checks import evaluate
from labs.lab3.conclusions import conclusions
from labs.lab3.contract import WorkerConfig, WorkerSpec, producer_argv, worker_argv, worker_env
from labs.lab3.deliveries import PelEntry, PelSample, delivered_again, failed_attempts, pending_after_charge
from labs.lab3.deployment import SentinelDeployment
from labs.lab3.measure import longest_gap, measure
from labs.lab3.record import CellRecord, ChargeRow, CrashRecord, Sample, Send, drain_lines, event_outcomes, read_sends
from labs.lab3.runner import Run
from labs.lab3.settings import PRESETS, Lab3Settings

STALL_MS = 1500


def pel(t: float, *rows: tuple[str, str, int, int]) -> PelSample:
    return PelSample(t, tuple(PelEntry(*row) for row in rows))


FAILED_AND_BACK = [  # 3-0 fails in billing-1, is reclaimed by billing-3 and fails once more there
    pel(101.0, ("3-0", "billing-1", 200, 1)),
    pel(102.5, ("3-0", "billing-1", 1700, 1)),
    pel(104.5, ("3-0", "billing-3", 100, 2)),
    pel(106.0, ("3-0", "billing-3", 1600, 2)),
]


def record(**changes: Any) -> CellRecord:  # CellRecord's fields, by name
    sends = [Send(f"e{i}", f"{i}-0", 100.0 + i, "unknown" if i == 3 else "confirmed") for i in range(1, 7)]
    charges = [ChargeRow(e, f"{e[1]}-0", "billing-1", 101.0 + i) for i, e in enumerate(["e1", "e2", "e2", "e3", "e6"])]
    base = CellRecord(
        sends=sends, charges=charges, dlq_events=["e5"],
        stream_entries={"e1": ["1-0"], "e2": ["2-0"], "e3": ["3-0"], "e5": ["5-0"], "e6": ["6-0"]},
        pending_end=0, pending_end_by_consumer={}, lag_end=0,
        samples=[Sample(100.0 + i, 2, 0) for i in range(20)], pels=FAILED_AND_BACK,
        exits=[{"consumer": "billing-2", "code": 0, "signal": "SIGTERM", "drain_logged": True}],
        t0=100.0, produce_end=110.0, stall_ms=STALL_MS,
    )
    return dataclasses.replace(base, **changes)


def run(variant: str, strategy: str, rec: CellRecord | None = None, worker: str = "") -> Run:
    rec = rec or record()
    return Run(1, variant, strategy, measure(variant.split("+")[0], strategy, rec, worker), rec, Path("/x"), worker)


def test_measure_counts_lost_duplicated_and_missing() -> None:
    res = measure("failover", "none", record(fault_t=104.5))
    assert (res.attempted, res.confirmed, res.unknown, res.refused, res.resent) == (6, 5, 1, 0, 0)
    assert res.lost == 1 and res.lost_ids == ["e4"]  # confirmed, neither charged nor in the DLQ
    assert res.duplicated == 1 and res.duplicate_ids == ["e2"]
    assert res.dead_lettered == 1 and res.unknown_but_charged == 1
    assert res.missing_on_new_master == 1 and res.missing_ids == ["e4"]
    assert res.lost_by_redis == 1  # e4 never reached the new master: no worker could charge it
    assert (res.failed_attempts, res.failed_redelivered, res.redeliveries) == (2, 1, 1)
    assert res.drain_complete == 1
    assert res.recover_first_charge_s == pytest.approx(105.0 - 104.5)  # e6, sent at 106, charged at 105


def test_resends_and_refusals_count_per_event_by_the_best_attempt() -> None:
    sends = [Send("a", None, 1.0, "unknown"), Send("a", "2-0", 2.0, "confirmed", 2),
             Send("b", None, 1.0, "refused"), Send("b", None, 2.0, "refused", 2),
             Send("c", "3-0", 1.0, "unknown"), Send("c", None, 2.0, "refused", 2)]
    assert event_outcomes(sends) == {"a": "confirmed", "b": "refused", "c": "unknown"}
    res = measure("failover", "sqlite", record(sends=sends, charges=[ChargeRow("b", "9-0", "billing-1", 3.0)]))
    assert (res.attempted, res.resent, res.confirmed, res.refused, res.unknown) == (3, 3, 1, 1, 1)
    assert res.refused_but_charged == 1  # a refusal that was charged: the producer's word was wrong


def test_read_sends_takes_old_and_new_lines_and_skips_a_torn_one(tmp_path: Path) -> None:
    log = tmp_path / "p.jsonl"
    log.write_text('{"event_id": "a", "msg_id": "1-0", "time": 1.5, "status": "confirmed"}\n'
                   '{"event_id": "b", "msg_id": null, "time": 2.0, "status": "refused", "attempt": 3}\n'
                   '{"event_id": "c", "msg_')
    assert read_sends(log) == [Send("a", "1-0", 1.5, "confirmed", 1), Send("b", None, 2.0, "refused", 3)]


def test_failed_attempts_and_redeliveries_come_from_the_pel_samples() -> None:
    assert failed_attempts(FAILED_AND_BACK, STALL_MS) == {("3-0", 1), ("3-0", 2)}
    assert failed_attempts(FAILED_AND_BACK, 2000) == set()
    assert delivered_again(FAILED_AND_BACK) == {"3-0"}
    same_holder_reset = [pel(1.0, ("1-0", "a", 1800, 1)), pel(2.0, ("1-0", "a", 50, 1))]  # XCLAIM JUSTID, or re-read
    assert delivered_again(same_holder_reset) == {"1-0"}
    just_older = [pel(1.0, ("1-0", "a", 100, 1)), PelSample(1.5, None), pel(2.0, ("1-0", "a", 1050, 1))]
    assert delivered_again(just_older) == set()  # idle grew with the clock (a gap where Redis did not answer)


def test_pending_after_charge_means_the_xack_never_landed() -> None:
    samples = [pel(10.2, ("1-0", "billing-2", 300, 1)), pel(12.0, ("1-0", "billing-2", 2100, 1), ("2-0", "b", 5, 1))]
    assert pending_after_charge(samples, {"1-0": 10.0, "2-0": 11.9}) == {"1-0"}  # 2-0 is just in flight


def test_duplicate_deliveries_from_resends_late_acks_and_the_crash() -> None:
    late = [pel(120.0, ("6-0", "billing-2", 9000, 1))]  # e6 was charged at 105, still pending at 120
    rec = record(stream_entries={"e1": ["1-0", "7-0"], "e3": ["3-0"], "e5": ["5-0"], "e6": ["6-0"]}, pels=late,
                 crash=CrashRecord("billing-2", tries=2, caught=True, held_at_stop=["2-0"], held_after_kill=["2-0"]))
    res = measure("crash", "none", rec)
    # e1 charged from 1-0 and in the stream again as 7-0 (a re-send), e6 pending after its charge, e2 held at the
    # kill; e3 was in the stream once: no duplicate
    assert res.duplicate_deliveries == 3
    lost_first = record(stream_entries={"e1": ["9-0"]}, pels=[])  # the failover dropped 1-0 after its charge
    assert measure("failover", "none", lost_first).duplicate_deliveries == 2  # e1, and e2: charged twice from 2-0
    assert (res.crash_held, res.crash_tries) == (1, 2)


def test_drain_lines_count_from_the_process_start(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("x INFO drain complete in 0.1s\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("y INFO started\n")
    assert drain_lines(log) == 1 and drain_lines(log, offset) == 0 and drain_lines(tmp_path / "none.log") == 0


def test_longest_gap_starts_at_the_last_point_before_the_fault() -> None:
    assert longest_gap([1.0, 2.0, 6.0, 6.5], start=3.0, end=7.0) == pytest.approx(4.0)
    assert longest_gap([], start=3.0, end=7.0) == pytest.approx(4.0)


def test_settings_validate_and_say_the_scale() -> None:
    assert PRESETS["full"].min_idle_scale == 40
    assert PRESETS["full"].consumers == ("billing-1", "billing-2", "billing-3") and PRESETS["smoke"].workers == 2
    with pytest.raises(ValueError, match="fault_at_s"):
        Lab3Settings(produce_s=5.0, fault_at_s=6.0)
    with pytest.raises(ValueError, match="unknown strategy"):
        Lab3Settings(strategies=("mongo",))
    with pytest.raises(ValueError, match="one sample interval"):
        Lab3Settings(min_idle_ms=500, sample_interval_s=0.5)
    assert Lab3Settings(min_idle_ms=1000, sample_interval_s=0.5).stall_ms == 500  # notebook 08's settings


def test_worker_contract_has_flags_and_environment(tmp_path: Path) -> None:
    site = SentinelDeployment((("127.0.0.1", 26390), ("127.0.0.1", 26391)), "mymaster")
    config = WorkerConfig("s", "billing", "billing-1", tmp_path / "l.sqlite3", "sqlite")
    s = PRESETS["quick"]
    argv = worker_argv(WorkerSpec.from_text("./my-worker --verbose"), site, config, s)
    assert argv[:2] == ["./my-worker", "--verbose"]
    assert argv.count("--sentinel") == 2 and "--consumer" in argv and "--ledger" in argv
    assert argv[argv.index("--max-attempts") + 1] == "5"
    assert worker_argv(WorkerSpec.from_text("./w", flags=False), site, config, s) == ["./w"]
    env = worker_env(site, config, s)
    assert env["BILLING_SENTINELS"] == "127.0.0.1:26390,127.0.0.1:26391"
    assert env["BILLING_CONSUMER"] == "billing-1" and env["BILLING_FAIL_EVERY"] == "7"
    producer = producer_argv(site, "s", tmp_path / "p.jsonl", s, wait=True)
    assert producer[producer.index("--resend") + 1] == "5" and "--wait-replicas" in producer


def test_conclusions_call_out_the_unexpected() -> None:
    text = " ".join(conclusions([run("normal", "sqlite")], PRESETS["quick"]))
    assert "UNEXPECTED" in text and "normal/sqlite 1" in text


def test_a_check_whose_situation_did_not_arise_fails_as_not_exercised() -> None:
    quiet = record(pels=[], exits=[{"consumer": "billing-2", "code": 0, "drain_logged": True}], fault_t=100.5,
                   charges=[ChargeRow(e, f"{e[1]}-0", "billing-1", 101.0) for e in ("e1", "e2", "e3", "e4", "e6")],
                   acked_not_done=[], crash=CrashRecord("billing-2", tries=8))
    runs = [run(v, "sqlite", quiet) for v in ("normal", "crash", "sigterm")]
    checks = {c.name.split(":")[0]: c for c in evaluate(runs)}
    for name in ("normal", "crash", "sqlite", "SIGTERM"):
        assert name in checks
    assert not checks["normal"].passed and checks["normal"].detail.startswith("not exercised: ")
    assert "never held a message that was charged" in checks["crash"].detail
    dedupe = [c for c in evaluate([run("crash", "sqlite", quiet)]) if "dedupe held" in c.name]
    assert not dedupe[0].passed and "the dedupe step never ran" in dedupe[0].detail
    assert not checks["SIGTERM"].passed
    assert "billing-2 had charged nothing before the SIGTERM" in checks["SIGTERM"].detail


def test_checks_of_modes_that_did_not_run_are_left_out() -> None:
    promoted = record(promoted_t=101.0, fault_t=100.5)
    runs = [run(variant, "sqlite", promoted) for variant in ("failover", "failover+wait")]
    names = [check.name.split(":")[0] for check in evaluate(runs)]
    assert names == ["sqlite", "sqlite", "XPENDING empty and lag 0 at the end of every run", "failover"]


def test_several_workers_are_checked_apart() -> None:
    runs = [run("normal", "sqlite", worker="mine"), run("normal", "sqlite", worker="theirs")]
    names = [c.name for c in evaluate(runs)]
    assert names[0].startswith("[mine] normal") and any(n.startswith("[theirs] normal") for n in names)


def test_repeated_cells_show_median_and_range() -> None:
    from labs.lab3.summary import _cell

    assert _cell([606, 602, 610]) == "606 [602..610]"
    assert _cell([0, 0, 0]) == 0 and _cell([None, None]) is None
    assert _cell([0.1, 0.13]) == "0.12 [0.10..0.13]"


def test_main_table_title_says_what_ran() -> None:
    from labs.lab3.summary import main_table

    variants = ("failover", "failover+wait", "sigterm")
    runs = [run(variant, strategy) for variant in variants for strategy in ("none", "sqlite")]
    assert main_table(runs).title == "Two modes x two dedupe strategies"  # failover+wait is failover's row
    assert main_table([run("normal", "sqlite")]).title == "One mode x one dedupe strategy"
    two = main_table([run("normal", "sqlite", worker="a"), run("normal", "sqlite", worker="b")])
    assert two.columns[0] == "worker" and [row[0] for row in two.rows] == ["a", "b"]


def test_recovery_ranges_collapse_when_the_ends_agree() -> None:
    from labs.lab3.conclusions import _span

    assert _span([2.41, 2.38]) == "2.4"  # not "2.4-2.4"
    assert _span([2.6, 2.9, 2.7]) == "2.6-2.9"


def test_a_crash_may_cost_the_redis_marker_work_but_not_none_or_sqlite() -> None:
    held = CrashRecord("billing-2", tries=2, caught=True, held_at_stop=["2-0"], held_after_kill=["2-0"])
    lost_one = record(crash=held)  # e4 confirmed, never charged
    for strategy, passed in (("redis", True), ("none", False), ("sqlite", False)):
        (crash,) = [c for c in evaluate([run("crash", strategy, lost_one)]) if c.name.startswith("crash")]
        assert crash.passed is passed, (strategy, crash.detail)
    (crash,) = [c for c in evaluate([run("crash", "redis", lost_one)]) if c.name.startswith("crash")]
    assert "the redis marker lost 1" in crash.detail


def test_a_rescuer_that_acks_failed_work_is_named_the_rescuer() -> None:
    # e4's entry 4-0 failed in billing-1, was reclaimed by billing-3, failed again there and was acked: never charged
    failed_twice = [pel(101.0, ("4-0", "billing-1", 200, 1)), pel(102.5, ("4-0", "billing-1", 1700, 1)),
                    pel(104.5, ("4-0", "billing-3", 100, 2)), pel(106.0, ("4-0", "billing-3", 1600, 2))]
    entries = {"e1": ["1-0"], "e2": ["2-0"], "e3": ["3-0"], "e4": ["4-0"], "e5": ["5-0"], "e6": ["6-0"]}
    rec = record(pels=failed_twice, stream_entries=entries)
    assert (measure("normal", "sqlite", rec).lost, measure("normal", "sqlite", rec).lost_after_failure) == (1, 1)
    (normal,) = [c for c in evaluate([run("normal", "sqlite", rec)]) if c.name.startswith("normal")]
    assert not normal.passed and normal.detail.startswith("the rescuer acks failed work"), normal.detail
    ack_first = [c for c in evaluate([run("normal", "sqlite")]) if c.name.startswith("normal")]  # e4 never pending
    assert ack_first[0].detail.startswith("acked without doing the work"), ack_first[0].detail
