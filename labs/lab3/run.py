"""``make lab-3`` (``python -m labs.lab3``): the four modes, the report, the checks.

Options: ``--quick`` (shorter load per mode), ``--repeat N``, ``--failover graceful``
(SENTINEL FAILOVER, or CLUSTER FAILOVER, instead of kill -9), ``--topology cluster`` (on the
native Redis Cluster, every stream in three shards: :mod:`labs.lab3.cluster_site`),
``--strategies``, ``--modes``, ``--worker CMD``
(default ``$WORKER``, else the reference; give it several times, as ``LABEL=CMD``, to run
workers side by side, each on cells of its own), ``--env-only`` (pass the worker its settings
in the environment only). Exit code 0 when every check passes, 1 when one fails, 2 when the
lab cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from labs.lab3.contract import WORKER_VAR, WorkerSpec
from labs.lab3.runner import DEPLOYMENTS, LabRuns, copy_records, delete_keys, deployment, run_phases
from labs.lab3.scenario import LabError
from labs.lab3.settings import FAILOVER_KINDS, MODES, PRESETS, STRATEGIES, Lab3Settings
from labs.lab3.summary import build_report
from labs.launcher.errors import LauncherError
from labs.report import Report, ReportPaths, left_running, make_console, print_report, write_report

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, float], None]
HEARTBEAT_S = 15.0  # without a terminal: a progress line at least this often


@dataclass
class Lab3Report:
    """What :func:`run_lab` returns: the report (checks, tables, figures, notes, data), where
    it was written, and the raw runs (records and measured results per cell)."""

    report: Report
    paths: ReportPaths | None
    runs: LabRuns

    @property
    def passed(self) -> bool:
        return self.report.passed


def worker_specs(worker: str | None = None, workers: Mapping[str, str | None] | None = None, *,
                 env_only: bool = False) -> WorkerSpec | dict[str, WorkerSpec]:
    """The worker under test (``worker``, else ``$WORKER``, else the reference), or several by label."""
    if workers:
        return {label: WorkerSpec.from_text(cmd, flags=not env_only) for label, cmd in workers.items()}
    spec = WorkerSpec.from_text(worker) if worker else WorkerSpec.from_env()
    return WorkerSpec(spec.command, flags=not env_only)


def parse_workers(values: Sequence[str]) -> dict[str, str | None]:
    """``--worker`` given several times: ``LABEL=CMD`` each (a bare ``CMD`` is labelled w1, w2 ...)."""
    out: dict[str, str | None] = {}
    for i, value in enumerate(values, 1):
        label, sep, cmd = value.partition("=")
        if not sep or " " in label or not label:
            label, cmd = f"w{i}", value
        if label in out:
            raise ValueError(f"--worker label {label!r} given twice")
        out[label] = cmd if cmd != "reference" else None
    return out


def run_lab(
    *,
    quick: bool = False,
    settings: Lab3Settings | None = None,
    worker: str | None = None,
    workers: Mapping[str, str | None] | None = None,
    env_only: bool = False,
    progress: ProgressFn | None = None,
    reports_dir: Path | None = None,
    write: bool = True,
    keep_keys: bool = False,
    topology: str = "sentinel",
) -> Lab3Report:
    """Run lab 3 on the native Sentinel topology, or ``topology="cluster"`` (started if needed); its report.

    ``progress(text, fraction)`` is called a few times a second with what runs now and how
    far the current phase is. ``worker`` is a command (default ``$WORKER``, else the
    reference ``python -m solutions.billing``); ``workers`` runs several side by side, by
    label (``{"mine": "./worker", "reference": None}``), each on cells of its own.
    """
    s = settings or PRESETS["quick" if quick else "full"]
    site = deployment(topology)
    runs = run_phases(s, worker_specs(worker, workers, env_only=env_only), progress, site=site)
    report = build_report(runs)
    paths = write_report(report, reports_dir) if write else None
    if paths is not None:
        copy_records(runs, paths.folder)
    if not keep_keys:
        delete_keys(runs, site)
    return Lab3Report(report, paths, runs)


class WorkerArgs(TypedDict, total=False):
    """``run_lab``'s and ``run_checks``' ``worker=`` (the one worker under test) or ``workers=`` (several, named)."""

    worker: str | None
    workers: dict[str, str | None]


def worker_args(values: Sequence[str]) -> WorkerArgs:
    """``run_lab``'s ``worker=`` (one ``--worker``) or ``workers=`` (several)."""
    if len(values) > 1:
        return {"workers": parse_workers(values)}
    return {"worker": values[0] if values else None}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m labs.lab3", description="Lab 3: a billing worker under faults.")
    p.add_argument("--quick", action="store_true", help="shorter load per mode (see labs/lab3/README.md for the times)")
    p.add_argument("--repeat", type=int, default=1, help="run every cell N times; the table shows median [min..max]")
    p.add_argument("--failover", choices=FAILOVER_KINDS, default="hard",
                   help="kill -9 (hard), or SENTINEL FAILOVER / CLUSTER FAILOVER (graceful)")
    p.add_argument("--topology", choices=tuple(DEPLOYMENTS), default="sentinel",
                   help="the native Sentinel topology, or the native Redis Cluster (each stream in three shards)")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated dedupe strategies")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated modes; 'partition' alone: a real network partition (root)")
    p.add_argument("--worker", action="append", default=[], metavar="[LABEL=]CMD",
                   help=f"worker command (default ${WORKER_VAR}, else the reference); repeat it, as LABEL=CMD, to run "
                   "several side by side ('reference' is the reference)")
    p.add_argument("--env-only", action="store_true", help="give the worker its settings in the environment only")
    p.add_argument("--reports-dir", type=Path, help="where reports go (default reports/ or $LAB_REPORTS_DIR)")
    p.add_argument("--keep-keys", action="store_true", help="leave the run's streams in Redis to inspect")
    return p


def settings_from_args(args: argparse.Namespace) -> Lab3Settings:
    base = PRESETS["quick" if args.quick else "full"]
    return base.with_options(
        repeat=args.repeat,
        failover=args.failover,
        strategies=tuple(x for x in args.strategies.split(",") if x),
        modes=tuple(x for x in args.modes.split(",") if x),
    )


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console)


@contextlib.contextmanager
def _progress_fn(console: Console) -> Iterator[ProgressFn]:
    """A live bar on a terminal; in a log or a pipe (CI, ``| tee``) one line per new step."""
    if console.is_terminal:
        with _progress(console) as bar:
            task = bar.add_task("starting", total=1.0)
            yield lambda text, fraction: bar.update(task, description=text, completed=min(1.0, fraction))
        return
    started = time.monotonic()
    last_step, last_at = "", 0.0

    def line(text: str, fraction: float) -> None:
        nonlocal last_step, last_at
        step, now = re.sub(r"\d+", "#", text), time.monotonic()  # a step is its text without the counts
        if step != last_step or now - last_at >= HEARTBEAT_S:
            last_step, last_at = step, now
            console.print(f"{now - started:6.1f} s {min(1.0, fraction):5.0%}  {escape(text)}", highlight=False)

    yield line


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    console = make_console()
    if args.modes == "partition":  # a real network partition: its own runner (labs/lab3/partition.py)
        from labs.lab3.partition import run_partition

        return run_partition(console, topology=args.topology, quick=args.quick,
                             worker=args.worker[0] if args.worker else None, reports_dir=args.reports_dir)
    try:
        s = settings_from_args(args)
    except ValueError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    console.print(f"lab 3 on {args.topology}: modes {', '.join(s.modes)} x dedupe {', '.join(s.strategies)}, "
                  f"repeat {s.repeat} ...")
    try:
        with _progress_fn(console) as show:
            result = run_lab(settings=s, env_only=args.env_only, progress=show, reports_dir=args.reports_dir,
                             keep_keys=args.keep_keys, topology=args.topology, **worker_args(args.worker))
    except (LauncherError, LabError, ValueError) as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    print_report(console, result.report, max_rows=40)
    for note in result.report.notes[:-1]:
        console.print(f"- {escape(note)}")
    if result.paths is not None:
        console.print(f"report: {result.paths.markdown}, {result.paths.html}, {result.paths.json}")
    left_running(console, args.topology)
    verdict = "[bold green]all checks passed[/]" if result.passed else "[bold red]some checks failed[/]"
    console.print(verdict)
    return 0 if result.passed else 1
