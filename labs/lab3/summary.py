"""Lab 3's report: the three-mode table, the timings, the checks and the conclusions in words.

With ``--repeat N`` a cell of the table shows ``median [min..max]``; ``report.json`` keeps
every run and the min/median/max of every figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from labs.lab3 import conclusions, figures
from labs.lab3.checks import evaluate
from labs.lab3.measure import CellResult
from labs.lab3.runner import LabRuns, Run
from labs.lab3.settings import COURSE_METRICS_INTERVAL_S
from labs.report import Report, Table, jsonable

FIGURES: tuple[tuple[str, str], ...] = (
    ("attempted", "sent"),
    ("confirmed", "confirmed"),
    ("unknown", "unknown"),
    ("charged_once", "charged once"),
    ("lost", "LOST"),
    ("duplicated", "DUPL"),
    ("dead_lettered", "DLQ"),
    ("reclaimed", "reclaimed"),
    ("redeliveries", "redeliv"),
    ("downtime_s", "downtime s"),
    ("recover_first_charge_s", "1st charge s"),
    ("recover_backlog_s", "backlog s"),
    ("settle_s", "drain s"),
    ("missing_on_new_master", "missing on new master"),
)
DEFINITIONS = (
    "LOST: confirmed by the producer (XADD answered, and with WAIT acknowledged by a replica), "
    "but neither charged in the ledger nor in the DLQ. DUPLICATED: events with more than one row "
    "in charges. DLQ: dead-lettered. Redeliv: failed attempts that were delivered again. "
    "Downtime: the longest gap between consecutive charges from the fault until the producer "
    "stopped (normal: over the whole load). 1st charge: fault -> first charge "
    "of an event sent after the fault (failover: after the promotion). Backlog: fault -> pending and lag back to their "
    "pre-fault maximum (under load they are never 0). Drain: producer stopped -> "
    "pending = 0 and lag = 0. Missing on new master: confirmed sends whose event is not in the stream "
    "after the failover. Reclaimed and redeliveries come from the worker logs, every other "
    "figure from the producer's log, the ledger or Redis."
)


def spread(values: Sequence[Any]) -> dict[str, Any]:
    known = [v for v in values if v is not None]
    if not known:
        return {"min": None, "median": None, "max": None}
    return {"min": min(known), "median": statistics.median(known), "max": max(known)}


def _num(value: Any, ints: bool) -> str:
    if ints:
        return str(int(value)) if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.2f}"


def _cell(values: Sequence[Any]) -> Any:
    """One value as it is; several as ``median [min..max]`` (or the value when they agree)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    ints = all(isinstance(v, int) for v in known)
    s = spread(known)
    if s["min"] == s["max"]:
        return s["min"] if ints else round(float(s["min"]), 2)
    return f"{_num(s['median'], ints)} [{_num(s['min'], ints)}..{_num(s['max'], ints)}]"


def groups(runs: Sequence[Run]) -> dict[tuple[str, str], list[CellResult]]:
    out: dict[tuple[str, str], list[CellResult]] = {}
    for r in runs:
        out.setdefault((r.variant, r.strategy), []).append(r.result)
    return out


def main_table(runs: Sequence[Run]) -> Table:
    rows = []
    for (variant, strategy), results in groups(runs).items():
        row = [variant, strategy] + [_cell([getattr(x, f) for x in results]) for f, _ in FIGURES]
        rows.append(tuple(row))
    repeats = max((r.repeat for r in runs), default=1)
    modes = {r.mode for r in runs}
    strategies = {r.strategy for r in runs}
    title = f"{_counted(len(modes), 'mode')} x {_counted(len(strategies), 'dedupe strategy')}".capitalize()
    title += f" (median [min..max] of {repeats} runs)" if repeats > 1 else ""
    return Table(title, ("mode", "dedupe", *(label for _, label in FIGURES)), tuple(rows))


def _counted(n: int, noun: str) -> str:
    """'three modes', 'one dedupe strategy': the table title says what actually ran."""
    word = ("no", "one", "two", "three", "four")[n] if n < 5 else str(n)
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{word} {noun if n == 1 else plural}"


def timing_table(lab: LabRuns) -> Table:
    rows: list[tuple[Any, ...]] = []
    for p in lab.phases:
        steps = ", ".join(f"{k} {v:.1f}" for k, v in p.durations_s.items())
        rows.append((p.mode, p.repeat, round(sum(p.durations_s.values()), 1), steps, _fault_text(p.fault)))
    rows.append(("total", "", round(lab.total_s, 1), "", ""))
    return Table("Phases: how long each took (seconds)", ("mode", "repeat", "total s", "steps", "fault"), tuple(rows))


def _fault_text(fault: dict[str, Any]) -> str:
    if not fault:
        return ""
    parts = [str(fault.get("kind", ""))]
    if "promoted_after_s" in fault:
        parts.append(f"new master {fault['new'][1]} after {fault['promoted_after_s']:.1f} s")
    if "replica_back_after_s" in fault:
        parts.append(f"old master back as a replica after {fault['replica_back_after_s']:.1f} s")
    if "restarted_after_s" in fault:
        parts.append(f"restarted {fault['restarted_after_s']:.1f} s after the signal")
    if "error" in fault:
        parts.append(f"error: {fault['error']}")
    return ", ".join(parts)


def settings_table(lab: LabRuns) -> Table:
    s = lab.settings
    rows = (
        ("worker", lab.worker),
        ("producer", f"billing-producer at {s.rate:g} events/s; failover also with WAIT 1 ({s.wait_timeout_ms} ms)"),
        ("workers per run", "billing-1, billing-2, billing-3"),
        ("handler", f"{s.handler_delay_ms} ms of work, every {s.fail_every}th attempt fails"),
        ("rescuer", f"XAUTOCLAIM every {s.claim_interval_ms} ms, min idle {s.min_idle_ms} ms: "
                    f"{s.min_idle_scale:g}x shorter than the course's 2 minutes"),
        ("metrics", f"logged every {s.metrics_interval_s:g} s (the course: {COURSE_METRICS_INTERVAL_S:g} s)"),
        ("load", f"{s.produce_s:g} s per mode ({s.failover_produce_s:g} s for failover), fault at {s.fault_at_s:g} s"),
        ("failover", "kill -9 of the master" if s.failover == "hard" else "SENTINEL FAILOVER (graceful)"),
        ("cells", "the strategies of a mode run at the same time, each on its own stream, group and ledger"),
        ("records", str(lab.home)),
    )
    return Table("Settings", ("setting", "value"), rows)


def report_data(lab: LabRuns) -> dict[str, Any]:
    """``results[strategy][mode]``: every run and the min/median/max of each figure."""
    results: dict[str, dict[str, Any]] = {}
    for (variant, strategy), items in groups(lab.runs).items():
        summary = {f: spread([getattr(x, f) for x in items]) for f, _ in FIGURES}
        results.setdefault(strategy, {})[variant] = {"runs": items, "summary": summary}
    return {
        "settings": lab.settings,
        "worker": lab.worker,
        "run_id": lab.run_id,
        "records": str(lab.home),
        "results": results,
        "phases": lab.phases,
        "total_s": lab.total_s,
    }


def build_report(lab: LabRuns) -> Report:
    report = Report(name="lab3", title="Lab 3: a billing worker under failover and SIGTERM")
    report.checks = evaluate(lab.runs)
    report.tables = [main_table(lab.runs), timing_table(lab), settings_table(lab)]
    report.figures = figures.figures(lab.runs)
    report.notes = [*conclusions.conclusions(lab.runs, lab.settings), DEFINITIONS]
    report.data = jsonable(report_data(lab))
    return report
