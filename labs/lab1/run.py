"""``make lab-1``: lab 1 of module 1 as one command, with its checks, experiments and report.

``python -m labs.lab1 [--quick] [--impl MODULE] [--redis-url URL]`` runs, on the lab's
``aof`` topology (appendonly everysec, started through the launcher when needed):

1. the scenario: a producer (XADD every 100 ms, ``MAXLEN ~ 1000``), consumers ``billing-1``
   and ``billing-2`` (every 5th event fails without an XACK) and the rescuer (XAUTOCLAIM
   every 5 s, min idle 3 s) with its journal of who took whose message;
2. the checks: XPENDING empty at the end, nothing lost against the producer's own log of
   acknowledged XADDs, XACK only after the work, every failure paired with its reprocessing;
3. the persistence experiment: ``kill -9`` of a server without persistence and of one
   with AOF everysec (each on free ports of its own, never the shared servers), and what
   survived;
4. the bonus: XADD p50/p99/p99.9 with no MAXLEN, ``MAXLEN ~ 10000`` and ``MAXLEN = 10000``,
   beside the server's ``usec_per_call``; and the ``maxlen=0`` trap measured on 25,000 entries
   (:mod:`labs.lab1.maxlen_zero`).

It prints the checks and figures as tables and writes ``reports/lab1-<timestamp>/`` with
``report.json``, ``report.md``, ``report.html`` and the raw logs. Exit code 0 when every
check passes, 1 when one fails, 2 when the lab cannot run (a launcher problem).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

import redis
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from labs.experiments import persistence
from labs.experiments.latency import LAB_CASES, LatencyStats, case_label, xadd_latency
from labs.lab1 import maxlen_zero
from labs.lab1.impl import REFERENCE, ImplError, load_impl
from labs.lab1.record import Sample, ScenarioResult
from labs.lab1.scenario import run_scenario
from labs.lab1.settings import PRESETS, Lab1Settings
from labs.lab1.summary import build_report, write_logs
from labs.launcher import topologies
from labs.launcher.errors import LauncherError
from labs.report import Report, ReportPaths, left_running, make_console, print_report, write_report

log = logging.getLogger(__name__)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def run_lab_scenario(
    impl_spec: str, url: str, settings: Lab1Settings, stream: str, console: Console
) -> ScenarioResult:
    impl = load_impl(impl_spec)
    with _progress(console) as progress:
        task = progress.add_task("scenario", total=settings.messages)

        def show(phase: str, sample: Sample) -> None:
            pending = ", ".join(f"{c} {n}" for c, n in sorted(sample.pending_by_consumer.items())) or "0"
            progress.update(
                task,
                completed=sample.sent,
                description=f"{phase}: sent {sample.sent}, processed {sample.processed}, pending {pending}",
            )

        return run_scenario(impl, url, settings, stream=stream, on_progress=show)


def run_persistence(settings: Lab1Settings, console: Console) -> list[persistence.SurvivalResult]:
    """kill -9 of a ``single`` and of an ``aof`` server of this run's own (free ports, temp dir)."""
    results: list[persistence.SurvivalResult] = []
    with tempfile.TemporaryDirectory(prefix="lab1-persistence-") as tmp, _progress(console) as progress:
        task = progress.add_task("persistence: kill -9", total=2)
        for name in ("single", "aof"):
            topo = topologies.on_free_ports(name, Path(tmp))
            try:
                topo.ensure()
                results.append(
                    persistence.kill_and_count(
                        topo, stream="lab1:persistence", n_writes=settings.persistence_writes
                    )
                )
            finally:
                topo.stop()
            progress.advance(task)
    return results


def run_latency(
    url: str, settings: Lab1Settings, stream: str, console: Console
) -> list[tuple[str, LatencyStats]]:
    cases: list[tuple[str, LatencyStats]] = []
    with _progress(console) as progress:
        task = progress.add_task("XADD latency", total=settings.latency_n * len(LAB_CASES))
        for index, (maxlen, approximate) in enumerate(LAB_CASES):
            label = case_label(maxlen, approximate)
            progress.update(task, description=f"XADD latency: {label}")
            done = index * settings.latency_n
            stats = xadd_latency(
                url,
                stream=stream,
                n=settings.latency_n,
                maxlen=maxlen,
                approximate=approximate,
                on_progress=functools.partial(_advance_to, progress, task, done),
            )
            progress.update(task, completed=done + settings.latency_n)
            cases.append((label, stats))
    return cases


def _advance_to(progress: Progress, task: TaskID, base: int, count: int) -> None:
    progress.update(task, completed=base + count)


def run_lab(
    settings: Lab1Settings,
    *,
    redis_url: str,
    impl_spec: str = REFERENCE,
    console: Console | None = None,
    reports_dir: Path | None = None,
) -> tuple[Report, ReportPaths]:
    """The whole lab; returns the report (``report.passed``) and where it was written."""
    console = console or Console()
    run_id = uuid.uuid4().hex[:8]
    stream = f"lab1:{run_id}:orders"
    try:
        result = run_lab_scenario(impl_spec, redis_url, settings, stream, console)
        survival = run_persistence(settings, console)
        latency = run_latency(redis_url, settings, f"lab1:{run_id}:latency", console)
        with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
            trap = maxlen_zero.measure(client, f"lab1:{run_id}:maxlen0")
    finally:
        with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
            client.delete(stream, f"lab1:{run_id}:latency", f"lab1:{run_id}:maxlen0")
    report = build_report(result, survival, latency, trap)
    paths = write_report(report, reports_dir)
    write_logs(paths, result)
    return report, paths


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labs.lab1", description="Lab 1: a Streams worker with a rescuer."
    )
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument("--quick", action="store_true", help="about a minute instead of about three")
    timing.add_argument("--smoke", action="store_true", help="scaled-down timings (seconds), for tests")
    parser.add_argument("--impl", default=REFERENCE, help=f"module name or .py file (default {REFERENCE})")
    parser.add_argument(
        "--redis-url", help="Redis to run on (default: the lab's aof topology, started if needed)"
    )
    parser.add_argument(
        "--reports-dir", type=Path, help="where reports go (default reports/ or $LAB_REPORTS_DIR)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    settings = PRESETS["smoke" if args.smoke else "quick" if args.quick else "full"]
    console = make_console()
    try:
        url = args.redis_url or topologies.from_env("aof").ensure().url
        console.print(f"lab 1 on {url} with {escape(args.impl)}: {settings.messages} events ...")
        report, paths = run_lab(
            settings, redis_url=url, impl_spec=args.impl, console=console, reports_dir=args.reports_dir
        )
    except (LauncherError, ImplError) as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    print_report(console, report)
    console.print(f"report: {paths.markdown}, {paths.html}, {paths.json}")
    if not args.redis_url:
        left_running(console, "aof", url)
    verdict = "[bold green]all checks passed[/]" if report.passed else "[bold red]some checks failed[/]"
    console.print(verdict)
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
