"""``python -m labs.bench`` (``make bench``): see ``--help``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from labs.bench import placement, runner
from labs.bench.results import table, verdicts, write_json
from labs.bench.shapes import SHAPES, shape_names
from labs.launcher import topologies
from labs.launcher.errors import LauncherError
from solutions.gc_tuning import tune_for_throughput

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labs.bench",
        description=(
            "Measure the billing-worker process against a raw redis.asyncio consumer process on the event "
            "shapes producers send (and, as diagnosis, the worker in this process against the same loop), on a "
            "redis-server of its own, and print figures, ratios and whether each target is met."
        ),
    )
    parser.add_argument("--tiny", action="store_true", help="a few seconds of everything (used by make test)")
    parser.add_argument("--events", type=int, help=f"pre-produced events per run (default {runner.FULL.events:,})")
    parser.add_argument("--reps", type=int, help=f"runs per figure, the median is shown (default {runner.FULL.reps})")
    parser.add_argument("--process-events", type=int,
                        help=f"events per run of the process rows (default {runner.FULL.process_events:,})")
    parser.add_argument("--process-reps", type=int,
                        help=f"rounds of the process rows (default {runner.FULL.process_reps}; 0 skips them)")
    parser.add_argument("--shapes", type=shape_names, metavar="NAME[,NAME...]",
                        help="the process rows' event shapes, comma-separated (default every one: "
                             + ", ".join(SHAPES) + ")")
    parser.add_argument("--no-failover", action="store_true", help="skip the Sentinel failover rounds")
    parser.add_argument("--no-memory", action="store_true", help="skip the 1M-message memory run")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Redis Cluster figures (shards, kill -9)")
    parser.add_argument("--out", type=Path, default=REPORTS, help=f"where the JSON goes (default {REPORTS})")
    return parser


def plan_from(args: argparse.Namespace) -> runner.Plan:
    plan = runner.TINY if args.tiny else runner.FULL
    if args.events:
        plan = replace(plan, events=args.events)
    if args.reps:
        plan = replace(plan, reps=args.reps)
    if args.process_events:
        plan = replace(plan, process_events=args.process_events)
    if args.process_reps is not None:
        plan = replace(plan, process_reps=args.process_reps)
    if args.shapes:
        plan = replace(plan, process_shapes=args.shapes)
    if args.no_failover:
        plan = replace(plan, failover_rounds=0)
    if args.no_memory:
        plan = replace(plan, memory_events=0)
    if args.no_cluster:
        plan = replace(plan, cluster_shards=(), cluster_kills=0)
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console(width=None if sys.stdout.isatty() else 150)
    plan = plan_from(args)
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        topo = topologies.on_free_ports("single", Path(tmp))
        try:
            url = topo.ensure().url
            where = placement.measure(url, topo.servers[0].pid())
            console.print(f"redis-server {url}; {where.describe()}")
            tune_for_throughput()  # as billing-worker does; the ceiling shares this process and its settings
            with Progress(console=console, transient=True, auto_refresh=False) as progress:
                rows = asyncio.run(runner.run_all(url, plan, progress))
        except LauncherError as exc:
            Console(stderr=True).print(f"error: {exc}", markup=False, highlight=False)
            return 2
        finally:
            topo.stop()
    console.print(table(rows, f"bench ({'tiny' if args.tiny else 'full'}): {plan}"))
    console.print(f"placement: {where.describe()}")
    for line in verdicts(rows):
        console.print(line)
    meta = {"plan": plan.__dict__, "placement": where.__dict__, "url": url}
    path = write_json(rows, meta, args.out)
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
