"""Lab 1's report: the checks, tables, charts, notes and raw logs of one ``make lab-1`` run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from labs.experiments import persistence
from labs.experiments.latency import LatencyStats
from labs.lab1 import figures
from labs.lab1.checks import evaluate
from labs.lab1.maxlen_zero import MaxlenZero
from labs.lab1.maxlen_zero import note as maxlen_zero_note
from labs.lab1.record import ScenarioResult
from labs.report import Check, Report, ReportPaths, Table, jsonable

SERVER_TIME_NOTE = (
    "The client round trip (tens of µs on loopback) hides the trimming cost; the server's "
    "usec_per_call from INFO commandstats (after CONFIG RESETSTAT) shows it: approximate "
    "trimming drops whole nodes now and then, exact trimming works on every call."
)


def persistence_check(results: Sequence[persistence.SurvivalResult]) -> Check:
    by_name = {r.topology: r for r in results}
    single, aof = by_name.get("single"), by_name.get("aof")
    name = "persistence: kill -9 loses all without persistence, nothing with AOF everysec"
    if single is None or aof is None:
        return Check(name, False, "the experiment did not run on both topologies")
    detail = (
        f"no persistence: {single.survived} of {single.acknowledged} survived; "
        f"AOF everysec: {aof.survived} of {aof.acknowledged} survived"
    )
    return Check(name, single.survived == 0 and aof.lost == 0 and aof.acknowledged > 0, detail)


def run_tables(result: ScenarioResult) -> list[Table]:
    rec = result.recorder
    s = result.settings
    failures = sum(not h.ok for h in rec.handled)
    processed = rec.processed_counters()
    duplicates = sum(1 for c in processed if sum(h.ok and h.counter == c for h in rec.handled) > 1)
    summary = Table(
        "Run",
        ("figure", "value"),
        (
            ("stream / group", f"{result.stream} / {result.group}"),
            (
                "producer",
                f"XADD every {s.produce_interval_ms} ms, MAXLEN ~ {s.maxlen}, for {result.produce_s:.1f} s",
            ),
            ("consumers", f"billing-1, billing-2: BLOCK {s.block_ms} ms, every {s.fail_every}th event fails"),
            ("rescuer", f"XAUTOCLAIM every {s.rescue_interval_ms} ms, min idle {s.min_idle_ms} ms"),
            ("acknowledged XADDs (producer's log)", len(rec.sent)),
            ("processed (distinct events)", len(processed)),
            ("failed attempts", failures),
            ("rescued by the rescuer", sum(j.ok for j in rec.journal)),
            ("processed twice (duplicates)", duplicates),
            ("drain after the producer stopped, s", round(result.drain_s, 1)),
            ("XLEN at the end", result.length_end),
        ),
    )
    journal = Table(
        "Rescuer's journal: who took whose message",
        ("t, s", "message", "event", "from", "to", "delivery", "reprocessed"),
        tuple(
            (
                round(j.t_s, 2),
                j.msg_id,
                f"#{j.counter}",
                j.from_consumer,
                j.to_consumer,
                j.deliveries,
                "yes" if j.ok else "failed again",
            )
            for j in rec.journal
        ),
    )
    return [summary, journal]


def maxlen_zero_table(m: MaxlenZero) -> Table:
    rows = [(f"{m.filled:,} XADDs, no MAXLEN", m.filled)]
    rows += [(f"xadd(..., maxlen=0), call {i}: MAXLEN ~ 0", n) for i, n in enumerate(m.approximate, 1)]
    rows.append(("xadd(..., maxlen=0, approximate=False): MAXLEN 0", m.exact))
    return Table("Trap: maxlen=0 in redis-py (XLEN after each call)", ("call", "XLEN"), tuple(rows))


def build_report(
    result: ScenarioResult,
    survival: Sequence[persistence.SurvivalResult],
    latency: Sequence[tuple[str, LatencyStats]],
    maxlen_zero: MaxlenZero | None = None,
) -> Report:
    report = Report("lab1", "Lab 1: a Streams worker with a rescuer")
    report.checks = [*evaluate(result), persistence_check(survival)]
    report.tables = run_tables(result)
    report.tables.append(
        Table(
            "Persistence: kill -9, then restart",
            ("topology", "acknowledged", "survived", "lost", "elapsed, s"),
            tuple((r.topology, r.acknowledged, r.survived, r.lost, round(r.elapsed_s, 2)) for r in survival),
        )
    )
    report.tables.append(
        Table(
            "Bonus: XADD latency",
            ("case", "n", "client p50, µs", "client p99, µs", "client p99.9, µs", "server usec_per_call"),
            tuple(
                (label, s.n, s.p50_us, s.p99_us, s.p999_us, s.server_usec_per_call) for label, s in latency
            ),
        )
    )
    if maxlen_zero is not None:
        report.tables.append(maxlen_zero_table(maxlen_zero))
    report.figures = [("Run over time", figures.timeline(result))]
    if survival:
        report.figures.append(("kill -9: what survived", figures.survival(survival)))
    if latency:
        report.figures.append(("XADD latency with and without MAXLEN", figures.latency(latency)))
    report.notes = [*([maxlen_zero_note(maxlen_zero)] if maxlen_zero else []), SERVER_TIME_NOTE]
    report.data = {
        "settings": asdict(result.settings),
        "journal": result.recorder.journal,
        "errors": [*result.recorder.errors, *result.recorder.send_errors],
        "persistence": list(survival),
        "latency": {label: stats for label, stats in latency},
        "maxlen_zero": maxlen_zero,
    }
    return report


def write_logs(paths: ReportPaths, result: ScenarioResult) -> None:
    """The raw records beside the report: the producer's log and every call of the work."""
    for filename, rows in (
        ("producer-log.jsonl", result.recorder.sent),
        ("work-log.jsonl", result.recorder.handled),
    ):
        lines = [json.dumps(jsonable(row)) for row in rows]
        (paths.folder / filename).write_text("\n".join(lines) + "\n", encoding="utf-8")
