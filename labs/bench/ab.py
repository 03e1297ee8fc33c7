"""``python -m labs.bench.ab --base REV``: ``make bench``'s process rows of two commits, paired in one run.

A change to the worker is "no slower" when its process rows, measured in the same run as the
rows of the commit before it, come out the same. This measures them so: a git worktree of the
base ``REV`` (A) and one of ``--head`` (B; ``HEAD`` by default: what is committed, not what
another hand left uncommitted in this checkout), both removed at the end; a redis-server of its
own (pinned as ``make bench`` pins it); and per round and shape one pre-produced stream with a
group for each run: the raw consumer first (the round's control), then each worker consumer of
the process rows from A and from B, A first in even rounds and B first in odd ones, so that
neither side always runs second. The measuring code is this checkout's for both sides
(:func:`labs.bench.process_runs.run` with ``tree``): only the consumer process differs.

Per row it prints each side's median rate and CPU per message, the median of the paired
ratios B/A with their spread (min … max), and the load average before each pair: on a busy
machine the CPU per message moves less than the rate does. ::

    .venv/bin/python -m labs.bench.ab --base 5c256ac --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import redis
from rich.console import Console
from rich.table import Table

from labs.bench import placement, process_runs
from labs.bench.process_runs import RAW, Consumer, Drain
from labs.bench.runner import DEFAULTS_SHAPE, PROCESS_TARGETS
from labs.bench.shapes import shape_names
from labs.launcher import topologies
from solutions.gc_tuning import tune_for_throughput

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
SIDES = ("A", "B")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labs.bench.ab",
        description="The process rows of make bench for the commit REV (A) and --head (B), each in a git "
                    "worktree, interleaved in one run on one redis-server; medians, paired ratios B/A, spread.",
    )
    parser.add_argument("--base", required=True, metavar="REV", help="the commit before the change (A)")
    parser.add_argument("--head", default="HEAD", metavar="REV", help="the commit after it (B; default HEAD)")
    parser.add_argument("--rounds", type=positive, default=3, help="pairs per row (default 3)")
    parser.add_argument("--events", type=positive, default=100_000, help="events per run (default 100,000)")
    parser.add_argument("--shapes", type=shape_names, default=(DEFAULTS_SHAPE,), metavar="NAME[,NAME...]",
                        help=f"event shapes, comma-separated (default {DEFAULTS_SHAPE!r})")
    parser.add_argument("--tuned-only", action="store_true",
                        help="skip the course defaults' rows (the throughput flags only)")
    parser.add_argument("--out", type=Path, default=REPORTS, help=f"where the JSON goes (default {REPORTS})")
    return parser


def consumers(shape: str, tuned_only: bool = False) -> list[Consumer]:
    """The worker consumers of ``make bench``'s process rows on ``shape`` (the raw loop aside)."""
    tuned = [process_runs.worker(d) for d in PROCESS_TARGETS]
    defaults = [process_runs.worker(d, ()) for d in PROCESS_TARGETS]
    return tuned + (defaults if shape == DEFAULTS_SHAPE and not tuned_only else [])


def resolve(rev: str, repo: Path = ROOT) -> str:
    """The full commit id of ``rev``; ValueError when git does not know it."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"no commit {rev!r} in {repo}")
    return done.stdout.strip()


@contextlib.contextmanager
def worktree(commit: str, parent: Path, side: str, repo: Path = ROOT) -> Iterator[Path]:
    """A detached git worktree of ``commit`` under ``parent`` (named by ``side``), removed on the way out."""
    path = parent / f"{side}-{commit[:12]}"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=repo, capture_output=True,
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True,
                       check=False)


@dataclass(frozen=True)
class Pair:
    """One round of one row: the base's run and the head's, back to back, on one stream."""

    round: int
    shape: str
    label: str
    a: Drain
    b: Drain
    raw: Drain  # the round's control: the raw consumer on the same stream, just before
    load_1m: float  # the load average when the pair began

    @property
    def ratio(self) -> float:
        return self.b.rate / self.a.rate

    @property
    def cpu_ratio(self) -> float | None:
        return None if not self.a.cpu_us or not self.b.cpu_us else self.b.cpu_us / self.a.cpu_us


def measure(url: str, trees: dict[str, Path], shapes: Sequence[str], rounds: int, n: int, workdir: Path,
            tuned_only: bool = False) -> list[Pair]:
    """``rounds`` rounds; per shape one stream, the raw run, then each row's A and B in alternating order."""
    pairs: list[Pair] = []
    for rnd in range(rounds):
        order = SIDES if rnd % 2 == 0 else SIDES[::-1]
        for k, shape in enumerate(shapes):
            row_consumers = consumers(shape, tuned_only)
            stream = f"bench:ab:{rnd}:{k}"
            groups = {(c.label, side): f"r{rnd}-s{k}-c{i}-{side}"
                      for i, c in enumerate(row_consumers) for side in SIDES}
            raw_group = f"r{rnd}-s{k}-raw"
            process_runs.produce(url, stream, n, shape, [raw_group, *groups.values()])
            try:
                raw = process_runs.run(RAW, url, stream, raw_group, n, workdir / raw_group)
                for consumer in row_consumers:
                    load_1m = os.getloadavg()[0]
                    drains = {side: process_runs.run(consumer, url, stream, groups[(consumer.label, side)], n,
                                                     workdir / groups[(consumer.label, side)], tree=trees[side])
                              for side in order}
                    pairs.append(Pair(rnd, shape, consumer.label, drains["A"], drains["B"], raw, load_1m))
                    log.info("round %d, %s · %s: A %.0f, B %.0f msgs/s (load %.1f)", rnd, consumer.label, shape,
                             drains["A"].rate, drains["B"].rate, load_1m)
            finally:
                with redis.Redis.from_url(url) as client:
                    client.delete(stream)
    return pairs


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summary(pairs: Sequence[Pair]) -> list[dict[str, object]]:
    """Per row (label · shape): the medians of each side, the paired ratios' median and spread, the loads."""
    rows: dict[tuple[str, str], list[Pair]] = {}
    for pair in pairs:
        rows.setdefault((pair.label, pair.shape), []).append(pair)
    out = []
    for (label, shape), own in rows.items():
        ratios = [p.ratio for p in own]
        cpu_ratios = [r for p in own if (r := p.cpu_ratio) is not None]
        out.append({
            "row": f"{label} · {shape}",
            "a_rate": statistics.median(p.a.rate for p in own),
            "b_rate": statistics.median(p.b.rate for p in own),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "a_cpu_us": _median([p.a.cpu_us for p in own]), "b_cpu_us": _median([p.b.cpu_us for p in own]),
            "cpu_ratio": _median(cpu_ratios),
            "cpu_ratio_min": min(cpu_ratios, default=None), "cpu_ratio_max": max(cpu_ratios, default=None),
            "raw_rate": statistics.median(p.raw.rate for p in own),
            "loads": [round(p.load_1m, 1) for p in own],
            "pairs": len(own),
        })
    return out


def _num(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, float | int) else "–"


def table(rows: Sequence[dict[str, object]], title: str) -> Table:
    out = Table(title=title, title_justify="left")
    for col in ("row", "A msgs/s", "B msgs/s", "B/A (min … max)", "A µs/msg", "B µs/msg", "B/A CPU (min … max)",
                "raw msgs/s", "load per pair"):
        out.add_column(col, justify="left" if col == "row" else "right")
    for row in rows:
        spread = f"{_num(row['ratio'], '.3f')} ({_num(row['ratio_min'], '.2f')} … {_num(row['ratio_max'], '.2f')})"
        cpu = f"{_num(row['cpu_ratio'], '.3f')} ({_num(row['cpu_ratio_min'], '.2f')} … " \
              f"{_num(row['cpu_ratio_max'], '.2f')})"
        out.add_row(str(row["row"]), _num(row["a_rate"], ",.0f"), _num(row["b_rate"], ",.0f"), spread,
                    _num(row["a_cpu_us"], ".2f"), _num(row["b_cpu_us"], ".2f"), cpu,
                    _num(row["raw_rate"], ",.0f"), " ".join(map(str, row["loads"]))
                    if isinstance(row["loads"], list) else "")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    console = Console(width=None if os.isatty(1) else 170)
    try:
        base, head = resolve(args.base), resolve(args.head)
    except ValueError as exc:
        Console(stderr=True).print(f"error: {exc}", markup=False, highlight=False)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp, contextlib.ExitStack() as trees:
        base_tree = trees.enter_context(worktree(base, Path(tmp), "A"))
        head_tree = trees.enter_context(worktree(head, Path(tmp), "B"))
        topo = topologies.on_free_ports("single", Path(tmp) / "redis")
        try:
            url = topo.ensure().url
            where = placement.measure(url, topo.servers[0].pid())
            console.print(f"redis-server {url}; {where.describe()}")
            tune_for_throughput()  # as make bench does
            pairs = measure(url, {"A": base_tree, "B": head_tree}, args.shapes, args.rounds, args.events,
                            Path(tmp) / "runs", args.tuned_only)
        finally:
            topo.stop()
    rows = summary(pairs)
    title = f"A = {base[:12]} (base), B = {head[:12]} (head); {args.rounds} rounds of {args.events:,} events"
    console.print(table(rows, title))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench-ab-{datetime.now():%Y%m%d-%H%M%S}.json"
    meta = {"base": base, "head": head, "rounds": args.rounds, "events": args.events, "placement": asdict(where)}
    path.write_text(json.dumps({"meta": meta, "rows": rows, "pairs": [asdict(p) for p in pairs]}, indent=2))
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
