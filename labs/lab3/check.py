"""``make check-lab-3 WORKER="..."``: lab 3's checks against a worker, PASS or FAIL with the reason.

``python -m labs.lab3.check [--worker CMD] [--strategies sqlite] [--modes normal,crash,failover,sigterm]``
runs the lab with the quick timings on the native Sentinel topology (``--topology cluster``: on
the native Redis Cluster, each stream in three shards), started if needed, by
default only with the ``sqlite`` strategy (the one that promises exactly-once effects), and
prints each check. ``--worker LABEL=CMD`` given several times checks several workers side by
side in the same phases (each check's name then starts with ``[LABEL]``). Exit code 0 when
every check passes, 1 when one fails, 2 when the lab cannot run at all.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.markup import escape

from labs.lab3.contract import WORKER_VAR, WorkerSpec
from labs.lab3.run import run_lab, worker_args
from labs.lab3.runner import DEPLOYMENTS
from labs.lab3.scenario import LabError
from labs.lab3.settings import MODES, PRESETS
from labs.launcher.errors import LauncherError
from labs.report import Check, left_running, make_console, print_checks


def run_checks(worker: str | None = None, *, workers: Mapping[str, str | None] | None = None,
               strategies: Sequence[str] = ("sqlite",), modes: Sequence[str] = MODES, env_only: bool = False,
               reports_dir: Path | None = None, preset: str = "quick", topology: str = "sentinel") -> list[Check]:
    """Every check of lab 3 against ``worker`` (default ``$WORKER``, else the reference), or against
    several ``workers`` side by side (by label; None is the reference)."""
    settings = PRESETS[preset].with_options(strategies=tuple(strategies), modes=tuple(modes))
    if workers:
        label = "; ".join(f"{k}: {WorkerSpec.from_text(v).label}" for k, v in workers.items())
    else:
        label = (WorkerSpec.from_text(worker) if worker else WorkerSpec.from_env()).label
    try:
        result = run_lab(settings=settings, worker=worker, workers=workers, env_only=env_only,
                         reports_dir=reports_dir, topology=topology)
    except LabError as exc:
        return [Check("the workers start and read from the group", False, str(exc))]
    checks = [Check("the workers start and read from the group", True, label), *result.report.checks]
    if result.paths is not None:
        checks.append(Check("report written", True, str(result.paths.markdown)))
    return checks


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m labs.lab3.check", description="Lab 3's checks against a worker.")
    p.add_argument("--worker", action="append", default=[], metavar="[LABEL=]CMD",
                   help=f"worker command (default ${WORKER_VAR}, else the reference); repeat it, as LABEL=CMD, to "
                   "check several side by side ('reference' is the reference)")
    p.add_argument("--strategies", default="sqlite", help="comma-separated dedupe strategies (default sqlite)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default all four)")
    p.add_argument("--env-only", action="store_true", help="give the worker its settings in the environment only")
    p.add_argument("--reports-dir", type=Path, help="where the report goes (default reports/ or $LAB_REPORTS_DIR)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="timings (default quick)")
    p.add_argument("--topology", choices=tuple(DEPLOYMENTS), default="sentinel",
                   help="the native Sentinel topology, or the native Redis Cluster (each stream in three shards)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    console = make_console()
    try:
        chosen = worker_args(args.worker)
        modes = [x for x in args.modes.split(",") if x]
        names = ", ".join(chosen["workers"]) if "workers" in chosen else escape(
            (WorkerSpec.from_text(chosen["worker"]) if chosen["worker"] else WorkerSpec.from_env()).label)
        console.print(f"lab 3 checks of [bold]{names}[/] ({args.preset} timings, modes {', '.join(modes)}) ...")
        checks = run_checks(strategies=[x for x in args.strategies.split(",") if x], modes=modes,
                            env_only=args.env_only, reports_dir=args.reports_dir, preset=args.preset,
                            topology=args.topology, **chosen)
    except (LauncherError, ValueError) as exc:
        console.print(f"error: {escape(str(exc))}")
        return 2
    code = print_checks(console, checks)
    left_running(console, args.topology)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
