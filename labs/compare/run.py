"""``make compare``: every case on every row, interleaved (case by case, row by row), one report.

Writes ``reports/compare-<timestamp>/report.{md,json,html}``: the durability of each row, the
publish window sweep and where each row stops growing, with the CPU each publish cost and each row's
ceiling (:func:`labs.compare.summary.ceiling`), the client's profile at the best window
(``profile-<row>.txt`` beside the report), the prefetch sweep, latency under load, memory at two
backlog sizes, the faults, Kafka's documented column, and plotly charts. Every cluster is started on
free ports (below the ephemeral range) and stopped at the end. The expected faults' library noise
goes to ``scenario.log`` beside the report (:mod:`labs.compare.scenario_log`).
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

from rich.console import Console
from rich.progress import Progress

from labs.compare import charts, kafka, plan, scenario_log, summary
from labs.compare.contract import Settings
from labs.compare.registry import DEFAULT_KINDS, KINDS, ROWS
from labs.compare.scenarios import Case, Row, run_case
from labs.compare.sites import Sites
from labs.report import Check, Report, Table, make_console, print_report, write_report

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

log = logging.getLogger(__name__)
LOAD_SECONDS_QUICK = 2.0
LOAD_SECONDS_FULL = 15.0


def cases(quick: bool) -> list[Case]:
    return plan.cases(quick)


async def _run_all(sites: Sites, kinds: tuple[str, ...], cases: list[Case], settings: Settings, work: Path,
                   progress: Progress) -> list[Row]:
    rows: list[Row] = []
    task = progress.add_task("compare", total=len(cases) * len(kinds))
    measured_memory: set[int] = set()  # one memory row per cluster (rows sharing one cluster share its RSS)
    for case in cases:
        for kind in kinds:
            progress.update(task, description=f"{case.name} on {kind}")
            site = sites.sites[kind]
            if case.memory_at and id(site.cluster) in measured_memory:
                progress.advance(task)
                continue
            if case.memory_at:
                measured_memory.add(id(site.cluster))
            try:
                rows.append(await run_case(site, case, settings, work))
            except Exception as exc:  # one broker's failure is a row that says so, not a lost report
                log.exception("%s on %s", case.name, kind)
                rows.append({"broker": kind, "case": case.name, "error": f"{type(exc).__name__}: {exc}"})
            progress.advance(task)
    return rows


async def _run_with_load(sites: Sites, kinds: tuple[str, ...], cases: list[Case], settings: Settings, work: Path,
                         progress: Progress, load_s: float, quick: bool) -> list[Row]:
    """The plan, then each row's profiled publish at its best window and its latency-under-load cases at
    shares of the maximum it just measured."""
    rows = await _run_all(sites, kinds, cases, settings, work, progress)
    for kind in kinds:
        rows += await _run_all(sites, (kind,), plan.profile_cases(rows, kind, quick=quick), settings, work, progress)
    for kind in kinds:
        rows += await _run_all(sites, (kind,), plan.load_cases(rows, kind, seconds=load_s), settings, work, progress)
    return rows


def build_report(rows: list[Row], elapsed_s: float, quick: bool, settings: Settings) -> Report:
    report = Report("compare", "Module 4: Redis Streams vs RabbitMQ vs NATS JetStream, same workload, same faults")
    for t in summary.all_tables(rows, "en"):
        report.tables.append(Table(t.title, t.columns, t.rows))
    report.tables.append(Table("Kafka (from its documentation, nothing measured)", ("topic", "documented"),
                               tuple(kafka.column().items())))
    report.checks += checks(rows)
    report.figures += charts.report_figures(rows)
    report.notes += [
        f"run took {elapsed_s:.0f} s ({'QUICK' if quick else 'full'}); settings {settings}",
        "2 cores shared with everything else: figures compare the rows on this machine, not vendors' clusters.",
        "window 1 is one event in flight: «задержка подтверждённой публикации» (the confirmed-publish round "
        "trip), not throughput. Windowed: aio-pika confirms gathered over the window, nats-py publish_async, "
        "redis-py a pipeline of XADDs and one WAIT; an unconfirmed event goes again with the next window.",
        "CPU of each throughput run (window sweep): the client is this process (time on a CPU of all its threads, "
        "from /proc/<pid>/task/*/schedstat), the broker every server process of the row's cluster with its process "
        "group, other work the rest of the machine's busy time (/proc/stat) over the same publish; cores = CPU "
        "seconds / wall seconds. The ceiling is the lowest of 1 / client CPU per message, 1 / the busiest broker "
        "process's CPU per message (one core each) and cores / (client + broker CPU per message); a profiled publish "
        "(cProfile, profile-<row>.txt) is a run of its own, its rate not a throughput figure.",
        "charges/s is bounded by the one handler and SQLite ledger every row runs (a transaction per charge), "
        "not by the broker: the prefetch sweep shows how little the broker's side moves it.",
        "failover gaps are each server's default timers on a clean kill -9: Sentinel down-after-milliseconds "
        "1000 (+ its election), RabbitMQ's Ra election, NATS's Raft election timeout (4-9 s in 2.9).",
        "Redis everysec may lose up to ~1-2 s on a power cut (notebook 03); WAIT is best effort in general "
        "(Sentinel may promote a replica without the write), 0 lost here is this topology's measurement.",
        "RabbitMQ 3.10.8 is the newest Debian 12 ships and past its support; 4.x quorum queues default the "
        "delivery limit to 20 and add priorities, without changing the confirm and fsync point measured here.",
        summary.WAL_NOTE,
    ]
    report.data = {"rows": rows, "elapsed_s": elapsed_s, "quick": quick, "rows_registry": {k: ROWS[k].about
                                                                                          for k in ROWS}}
    return report


def checks(rows: list[Row]) -> list[Check]:
    out = []
    for r in rows:
        if "error" in r:
            out.append(Check(f"{r['case']} on {r['broker']} ran", False, r["error"]))
            continue
        if r["case"] == "partition":  # Redis without WAIT loses what the cut-off master took alone: measured
            if r["broker"] != "redis":
                cut_off = dict(r).get("lost_cut_off_side")
                out.append(Check(f"partition on {r['broker']}: nothing acknowledged then lost", r.get("lost") == 0,
                                 f"lost {r.get('lost')}, of them confirmed by the cut-off side {cut_off}"))
            continue
        if r["broker"] != "redis":  # Redis without WAIT may lose confirmed writes at a failover: measured, not a fault
            out.append(Check(f"{r['case']} on {r['broker']}: lost = 0", r["lost"] == 0, f"lost {r['lost']}"))
        out.append(Check(f"{r['case']} on {r['broker']}: no event charged twice", r["charged_twice"] == 0,
                         f"absorbed {r['duplicates_absorbed']} duplicate deliveries"))
        if r["case"] == "poison":
            who = "broker" if r.get("broker_dead_letters") else "consumer"
            out.append(Check(f"poison on {r['broker']}: {r.get('poison_attempts')} deliveries, moved by "
                             f"{r.get('dead_lettered_by')}", r.get("dead_lettered_by") == who
                             and r.get("poison_dead_lettered") is True, f"expected the {who}"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.compare")
    parser.add_argument("--quick", action="store_true", help="small event counts (a few minutes in all)")
    parser.add_argument("--brokers", default=",".join(DEFAULT_KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--no-partition", action="store_true",
                        help="skip the partition case (each broker again in network namespaces, a few minutes)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    kinds = tuple(k for k in args.brokers.split(",") if k)
    console = make_console()
    settings = Settings()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        work = Path(tmp)
        sites = Sites(work / "run")
        with scenario_log.to_file(work / "scenario.log") as log_path:
            try:
                console.print(f"starting {', '.join(kinds)} (RabbitMQ takes about a minute) ...")
                sites.start(kinds)
                with Progress(console=console) as progress:
                    load_s = LOAD_SECONDS_QUICK if args.quick else LOAD_SECONDS_FULL
                    rows = asyncio.run(_run_with_load(sites, kinds, cases(args.quick), settings, work, progress,
                                                      load_s, args.quick))
            finally:
                sites.stop()
            if not args.no_partition:
                rows += _partition_rows(kinds, settings, work, console)
        report = build_report(rows, time.monotonic() - started, args.quick, settings)
        paths = write_report(report)
        (paths.markdown.parent / "scenario.log").write_bytes(log_path.read_bytes())
        write_profiles(rows, paths.markdown.parent)
    print_report(console, report, max_rows=60)
    took_s = time.monotonic() - started
    console.print(f"report: {paths.markdown} (also .json, .html, scenario.log); took {took_s:.0f} s")
    return 0 if report.passed else 1


def write_profiles(rows: list[Row], folder: Path) -> list[Path]:
    """``profile-<row>.txt`` in ``folder`` for every profiled publish (the client's pstats listing)."""
    written = []
    for r in rows:
        if "error" not in r and str(r["case"]).startswith("profile-") and r.get("profile_text"):
            path = folder / f"profile-{r['broker'].replace('+', '-')}.txt"
            path.write_text(summary.profile_text(r))
            written.append(path)
    return written


def _partition_rows(kinds: tuple[str, ...], settings: Settings, work: Path, console: Console) -> list[Row]:
    """The launcher's partition case (labs.compare.partition_case) for the rows it knows, after the others
    (its clusters run in network namespaces of their own); none, with the reason, where it cannot run."""
    from labs.compare import partition_case

    if (why := partition_case.unavailable_reason()) is not None:
        console.print(f"partition case skipped: {why}")
        return []
    known = tuple(k for k in kinds if k in partition_case.KINDS)
    console.print(f"partition case on {', '.join(known)} (each broker in network namespaces) ...")
    return list(partition_case.run_partition_rows(known, settings, work / "partition"))


def in_thread(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """``fn(*args)`` in a worker thread: what calls ``asyncio.run`` (starting NATS waits for its stream)
    cannot run on a notebook kernel's own running loop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


def run_cases_sync(sites: Sites, kinds: tuple[str, ...], cases: list[Case], settings: Settings,
                   work: Path) -> list[Row]:
    """:func:`_run_all` on an event loop of its own in a worker thread: a notebook's kernel already
    runs a loop, so ``asyncio.run`` cannot be called in it."""
    from concurrent.futures import ThreadPoolExecutor

    def _in_thread() -> list[Row]:
        with Progress(console=make_console(), disable=True) as progress:
            return asyncio.run(_run_all(sites, kinds, cases, settings, work, progress))

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_in_thread).result()
