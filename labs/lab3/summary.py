"""Lab 3's report: the table of modes x strategies, the timings, the checks and the conclusions in words.

With ``--repeat N`` a cell of the table shows ``median [min..max]``; ``report.json`` keeps
every run and the min/median/max of every figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypedDict

from labs.lab3 import conclusions, figures
from labs.lab3.checks import evaluate
from labs.lab3.deployment import Fault
from labs.lab3.measure import CellResult
from labs.lab3.runner import LabRuns, Run
from labs.lab3.settings import COURSE_METRICS_INTERVAL_S
from labs.report import Report, Table, jsonable

FIGURES: tuple[tuple[str, str], ...] = (
    ("attempted", "sent"),
    ("resent", "re-sent"),
    ("confirmed", "confirmed"),
    ("unknown", "unknown"),
    ("refused", "refused"),
    ("charged_once", "charged once"),
    ("lost", "LOST"),
    ("duplicated", "DUPL"),
    ("duplicate_deliveries", "dup deliv"),
    ("dead_lettered", "DLQ"),
    ("failed_attempts", "failed"),
    ("redeliveries", "redeliv"),
    ("downtime_s", "downtime s"),
    ("recover_first_charge_s", "1st charge s"),
    ("recover_backlog_s", "backlog s"),
    ("settle_s", "drain s"),
    ("missing_on_new_master", "missing on new master"),
)
DEFINITIONS = (
    "Sent: events; re-sent: the producer's extra attempts, same event_id, for sends whose outcome was unknown "
    "or refused. Confirmed / unknown / refused: events by their best attempt (refused: Redis answered the XADD "
    "with an error, so the entry is known not to be in the stream). LOST: confirmed (XADD answered, and with "
    "WAIT acknowledged by a replica), but neither charged in the ledger nor in the DLQ. DUPL: events with more "
    "than one row in charges. Dup deliv: events delivered again after their charge (the stream holds them twice "
    "after a re-send, or Redis showed them pending after the charge: a crash or a failover lost the XACK); the "
    "dedupe step is exercised only then. DLQ: dead-lettered. Failed: deliveries Redis showed unacknowledged "
    "for half of min idle or more (XPENDING samples). Redeliv: entries Redis showed delivered again (delivery "
    "count, holder or idle time reset). Downtime: the longest gap between consecutive charges from the fault "
    "until the producer stopped (normal: over the whole load). 1st charge: fault -> first charge of an event "
    "sent after the fault (failover: after the promotion). Backlog: fault -> pending and lag back to their "
    "pre-fault maximum (under load they are never 0). Drain: producer stopped -> pending = 0 and lag = 0. "
    "Missing on new master: confirmed events not in the stream after the failover (writes the failover lost, "
    "counted apart from the workers' losses). Every figure comes from the producer's log, the ledger or Redis; "
    "the only thing read from a worker's output is its 'drain complete' line."
)


class Spread(TypedDict):
    """The min, median and max of a figure over the repeats (None when no repeat measured it)."""

    min: float | None
    median: float | None
    max: float | None


def spread(values: Sequence[float | None]) -> Spread:
    known = [v for v in values if v is not None]
    if not known:
        return Spread(min=None, median=None, max=None)
    return Spread(min=min(known), median=statistics.median(known), max=max(known))


def _num(value: float, ints: bool) -> str:
    if ints:
        return str(int(value)) if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.2f}"


def _cell(values: Sequence[float | None]) -> float | str | None:
    """One value as it is; several as ``median [min..max]`` (or the value when they agree)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    ints = all(isinstance(v, int) for v in known)
    low, median, high = min(known), statistics.median(known), max(known)
    if low == high:
        return low if ints else round(float(low), 2)
    return f"{_num(median, ints)} [{_num(low, ints)}..{_num(high, ints)}]"


def groups(runs: Sequence[Run]) -> dict[tuple[str, str, str], list[CellResult]]:
    """The results of each (worker, mode variant, strategy), one per repeat."""
    out: dict[tuple[str, str, str], list[CellResult]] = {}
    for r in runs:
        out.setdefault((r.worker, r.variant, r.strategy), []).append(r.result)
    return out


def main_table(runs: Sequence[Run]) -> Table:
    several = len({r.worker for r in runs}) > 1
    rows = []
    for (worker, variant, strategy), results in groups(runs).items():
        row = [variant, strategy] + [_cell([getattr(x, f) for x in results]) for f, _ in FIGURES]
        rows.append(tuple([worker, *row] if several else row))
    repeats = max((r.repeat for r in runs), default=1)
    modes = {r.mode for r in runs}
    strategies = {r.strategy for r in runs}
    title = f"{_counted(len(modes), 'mode')} x {_counted(len(strategies), 'dedupe strategy')}".capitalize()
    title += f" (median [min..max] of {repeats} runs)" if repeats > 1 else ""
    columns = ("mode", "dedupe", *(label for _, label in FIGURES))
    return Table(title, ("worker", *columns) if several else columns, tuple(rows))


def _counted(n: int, noun: str) -> str:
    """'three modes', 'one dedupe strategy': the table title says what actually ran."""
    word = ("no", "one", "two", "three", "four")[n] if n < 5 else str(n)
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{word} {noun if n == 1 else plural}"


def timing_table(lab: LabRuns) -> Table:
    rows: list[tuple[object, ...]] = []
    for p in lab.phases:
        steps = ", ".join(f"{k} {v:.1f}" for k, v in p.durations_s.items())
        rows.append((p.mode, p.repeat, round(sum(p.durations_s.values()), 1), steps, _fault_text(p.fault)))
    rows.append(("total", "", round(lab.total_s, 1), "", ""))
    return Table("Phases: how long each took (seconds)", ("mode", "repeat", "total s", "steps", "fault"), tuple(rows))


def shard_table(runs: Sequence[Run]) -> Table | None:
    """On a cluster: each shard's downtime per cell, the shard(s) whose master the failover took marked."""
    rows = []
    for r in runs:
        for i, (name, downtime) in enumerate(zip(r.record.shards, r.result.shard_downtime_s, strict=True)):
            hit = "its master failed over" if i in r.result.hit_shards else ""
            rows.append((r.variant, r.strategy, i, name.rsplit(":", 1)[-1], hit,
                         None if downtime is None else round(downtime, 2)))
    if not rows:
        return None
    return Table("Per shard: downtime (longest gap between the shard's charges from the fault, or over the load)",
                 ("mode", "dedupe", "shard", "tag", "fault", "downtime s"), tuple(rows))


def _fault_text(fault: Fault) -> str:
    if not fault:
        return ""
    parts = [str(fault.get("kind", ""))]
    if "promoted_after_s" in fault:
        parts.append(f"new master {fault['new'][1]} after {fault['promoted_after_s']:.1f} s")
    if "replica_back_after_s" in fault:
        parts.append(f"old master back as a replica after {fault['replica_back_after_s']:.1f} s")
    if "restarted_after_s" in fault:
        parts.append(f"restarted {fault['restarted_after_s']:.1f} s after the signal")
    if "pauses" in fault:
        parts.append(f"caught {fault['caught']} of {fault['cells']} cells within {fault['pauses']} write pauses, "
                     f"{fault['held_after_kill']} charged, unacknowledged messages at the kills")
    if "error" in fault:
        parts.append(f"error: {fault['error']}")
    return ", ".join(parts)


def settings_table(lab: LabRuns) -> Table:
    s = lab.settings
    rows = (
        ("worker", lab.worker),
        ("producer", f"billing-producer at {s.rate:g} events/s; failover also with WAIT 1 ({s.wait_timeout_ms} ms)"),
        ("workers per run", ", ".join(s.consumers)),
        ("handler", f"{s.handler_delay_ms} ms of work, every {s.fail_every}th attempt fails, DLQ after "
                    f"{s.max_attempts} deliveries"),
        ("re-sends", f"the producer re-sends an unknown or refused send up to {s.resend} times, same event_id"),
        ("crash", f"kill -9 of billing-2 caught within CLIENT PAUSE {s.crash_pause_ms} ms WRITE "
                  f"(up to {s.crash_tries} pauses)"),
        ("rescuer", f"XAUTOCLAIM every {s.claim_interval_ms} ms, min idle {s.min_idle_ms} ms: "
                    f"{s.min_idle_scale:g}x shorter than the course's 2 minutes"),
        ("metrics", f"logged every {s.metrics_interval_s:g} s (the course: {COURSE_METRICS_INTERVAL_S:g} s)"),
        ("load", f"{s.produce_s:g} s per mode ({s.failover_produce_s:g} s for failover), fault at {s.fault_at_s:g} s"),
        ("failover", _failover_text(lab)),
        ("cells", "the strategies of a mode run at the same time, each on its own stream, group and ledger"),
        ("records", str(lab.home)),
    )
    return Table("Settings", ("setting", "value"), rows)


def _failover_text(lab: LabRuns) -> str:
    hard = lab.settings.failover == "hard"
    if lab.topology == "cluster":
        return ("kill -9 of the master that serves slot 0 (one shard of every cell)" if hard
                else "CLUSTER FAILOVER on that master's replica (graceful)")
    return "kill -9 of the master" if hard else "SENTINEL FAILOVER (graceful)"


def report_data(lab: LabRuns) -> dict[str, object]:
    """``results[strategy][mode]`` (``results["<worker>/<strategy>"]`` with several workers under
    test): every run and the min/median/max of each figure."""
    results: dict[str, dict[str, object]] = {}
    for (worker, variant, strategy), items in groups(lab.runs).items():
        summary = {f: spread([getattr(x, f) for x in items]) for f, _ in FIGURES}
        key = f"{worker}/{strategy}" if worker else strategy
        results.setdefault(key, {})[variant] = {"runs": items, "summary": summary}
    return {
        "settings": lab.settings,
        "worker": lab.worker,
        "workers": lab.workers,
        "run_id": lab.run_id,
        "records": str(lab.home),
        "results": results,
        "phases": lab.phases,
        "total_s": lab.total_s,
        "topology": lab.topology,
    }


def build_report(lab: LabRuns) -> Report:
    report = Report(name="lab3", title="Lab 3: a billing worker under failover and SIGTERM")
    report.checks = evaluate(lab.runs)
    shards = shard_table(lab.runs)
    report.tables = [main_table(lab.runs), *([shards] if shards else []), timing_table(lab), settings_table(lab)]
    report.figures = figures.figures(lab.runs)
    report.notes = [*conclusions.conclusions(lab.runs, lab.settings), DEFINITIONS]
    report.data = jsonable(report_data(lab))
    return report
