"""``make compare``: every case on every broker, interleaved (case by case, broker by broker), one report.

Writes ``reports/compare-<timestamp>/report.{md,json,html}``: the table (a row per broker and case),
the durability settings of each row, Kafka's documented column, and plotly charts (latency, throughput,
the leader-kill timeline).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, TypeVarTuple

import plotly.graph_objects as go
from rich.progress import Progress

from labs.compare import charts, kafka
from labs.compare.contract import Settings
from labs.compare.scenarios import Case, Row, run_case
from labs.compare.sites import KINDS, Sites
from labs.report import Check, Report, Table, make_console, print_report, write_report

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

log = logging.getLogger(__name__)
COLUMNS = ("broker", "case", "confirmed", "unknown", "refused", "charged", "lost", "charged_twice",
           "duplicates_absorbed", "dead_lettered", "publish_per_s", "charges_per_s", "p50_ms", "p99_ms", "max_ms",
           "first_charge_after_kill_s", "longest_gap_s", "crash_redelivered_after_s", "poison_attempts",
           "out_of_order", "rss_mb_per_million")


def cases(quick: bool) -> list[Case]:
    """The workload: small with ``quick`` (about a minute per broker), larger otherwise."""
    k = 1 if quick else 10
    return [
        Case("throughput", 200 * k),
        Case("latency", 50 * k, rate_per_s=50),
        Case("leader-kill", 60 * k, rate_per_s=30, kill_leader_at_s=1.0 * k),
        Case("consumer-kill", 40 * k, crash_consumer=True),
        Case("poison", 40 * k, poison=True),
        Case("backlog", 500 * k * 2, hold=True),
        Case("order", 60 * k, orders=4, consumers=3),
    ]


async def _run_all(sites: Sites, kinds: tuple[str, ...], plan: list[Case], settings: Settings, work: Path,
                   progress: Progress) -> list[Row]:
    rows: list[Row] = []
    task = progress.add_task("compare", total=len(plan) * len(kinds))
    for case in plan:
        for kind in kinds:
            progress.update(task, description=f"{case.name} on {kind}")
            try:
                rows.append(await run_case(sites.sites[kind], case, settings, work))
            except Exception as exc:  # one broker's failure is a row that says so, not a lost report
                log.exception("%s on %s", case.name, kind)
                rows.append({"broker": kind, "case": case.name, "error": f"{type(exc).__name__}: {exc}"})
            progress.advance(task)
    return rows


def build_report(rows: list[Row], elapsed_s: float, quick: bool, settings: Settings) -> Report:
    report = Report("compare", "Module 4: Redis Streams vs RabbitMQ vs NATS JetStream, same workload, same faults")
    report.tables.append(Table("results (a row per broker and case)", COLUMNS,
                               tuple(tuple(r.get(c, "") for c in COLUMNS) for r in rows)))
    settings_rows = {r["broker"]: r.get("durability", "") for r in rows}
    report.tables.append(Table("durability settings per row", ("broker", "settings"),
                               tuple(settings_rows.items())))
    report.tables.append(Table("Kafka (from its documentation, nothing measured)", ("topic", "documented"),
                               tuple(kafka.column().items())))
    for r in rows:
        if "error" in r:
            report.checks.append(Check(f"{r['case']} on {r['broker']} ran", False, r["error"]))
            continue
        if r["broker"] != "redis":  # Redis without WAIT may lose confirmed writes at a failover: measured, not a fault
            report.checks.append(Check(f"{r['case']} on {r['broker']}: lost = 0", r["lost"] == 0, f"lost {r['lost']}"))
        report.checks.append(Check(f"{r['case']} on {r['broker']}: no event charged twice", r["charged_twice"] == 0,
                                   f"absorbed {r['duplicates_absorbed']} duplicate deliveries"))
    report.figures += _figures(rows)
    report.notes += [
        f"run took {elapsed_s:.0f} s ({'QUICK' if quick else 'full'}); settings {settings}",
        "2 cores shared with everything else: figures compare brokers on this machine, not vendors' clusters.",
        "NATS 2.9 fsyncs every 2 minutes (not before the ack); RabbitMQ quorum queues fsync before confirming; "
        "Redis with appendfsync everysec may lose up to a second on a power cut, and without WAIT a failover "
        "may drop what the replica had not received.",
        "publish_per_s: one producer, one event in flight (each waits for its confirmation).",
        "rss_mb_per_million: (RSS with the backlog held - RSS before) / messages held x 10^6; with QUICK's "
        "1000 messages it is dominated by allocator steps, read it from the full run only.",
        "first_charge_after_kill_s: from the kill to the first charge of an event first sent after it; "
        "longest_gap_s: the longest pause between charges from a second before the kill on (the downtime).",
    ]
    report.data = {"rows": rows, "elapsed_s": elapsed_s, "quick": quick}
    return report


def _figures(rows: list[Row]) -> list[tuple[str, go.Figure]]:
    ok = [r for r in rows if "error" not in r]
    lat = go.Figure()
    for case in ("latency", "throughput"):
        sel = [r for r in ok if r["case"] == case]
        for q in ("p50_ms", "p99_ms", "max_ms"):
            lat.add_bar(name=f"{case} {q}", x=[r["broker"] for r in sel], y=[r.get(q) for r in sel])
    lat.update_layout(barmode="group", title="produce -> charge latency, ms", yaxis_type="log")
    thr = go.Figure()
    sel = [r for r in ok if r["case"] == "throughput"]
    thr.add_bar(name="confirmed publishes/s", x=[r["broker"] for r in sel], y=[r.get("publish_per_s") for r in sel])
    thr.add_bar(name="charges/s", x=[r["broker"] for r in sel], y=[r.get("charges_per_s") for r in sel])
    thr.update_layout(barmode="group", title="throughput")
    kill = go.Figure()
    sel = [r for r in ok if r["case"] == "leader-kill"]
    for q in ("first_charge_after_kill_s", "longest_gap_s"):
        kill.add_bar(name=q, x=[r["broker"] for r in sel], y=[r.get(q) for r in sel])
    kill.update_layout(barmode="group", title="kill -9 of the leader: seconds without charges")
    return [("latency", lat), ("throughput", thr), ("failover", kill),
            ("failover timeline", charts.timeline(ok, lang="en")),
            ("latency distributions", charts.latency_cdf(ok, cases=("latency", "leader-kill"), lang="en"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.compare")
    parser.add_argument("--quick", action="store_true", help="small event counts (a few minutes in all)")
    parser.add_argument("--brokers", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("nats").setLevel(logging.CRITICAL)  # its reconnect tracebacks during a kill are expected
    kinds = tuple(k for k in args.brokers.split(",") if k)
    console = make_console()
    settings = Settings()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        work = Path(tmp)
        sites = Sites(work / "run")
        try:
            console.print(f"starting {', '.join(kinds)} (RabbitMQ takes about a minute) ...")
            sites.start(kinds)
            with Progress(console=console) as progress:
                rows = asyncio.run(_run_all(sites, kinds, cases(args.quick), settings, work, progress))
        finally:
            sites.stop()
    report = build_report(rows, time.monotonic() - started, args.quick, settings)
    paths = write_report(report)
    print_report(console, report, max_rows=60)
    console.print(f"report: {paths.markdown} (also .json, .html); took {time.monotonic() - started:.0f} s")
    return 0 if report.passed else 1


def in_thread(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """``fn(*args)`` in a worker thread: what calls ``asyncio.run`` (starting NATS waits for its stream)
    cannot run on a notebook kernel's own running loop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


def run_cases_sync(sites: Sites, kinds: tuple[str, ...], plan: list[Case], settings: Settings,
                   work: Path) -> list[Row]:
    """:func:`_run_all` on an event loop of its own in a worker thread: a notebook's kernel already
    runs a loop, so ``asyncio.run`` cannot be called in it."""
    from concurrent.futures import ThreadPoolExecutor

    def _in_thread() -> list[Row]:
        with Progress(console=make_console(), disable=True) as progress:
            return asyncio.run(_run_all(sites, kinds, plan, settings, work, progress))

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_in_thread).result()
