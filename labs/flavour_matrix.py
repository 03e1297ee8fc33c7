"""``make test-matrix``: the Redis-facing tests and the notebooks on each server flavour, one table.

For each flavour (``redis7``, ``valkey8``, ``redis8``; :mod:`labs.launcher.flavours`) it installs the
binaries (``scripts/ensure-flavour.sh``), runs pytest with ``REDIS=<flavour>`` (the session's servers,
Sentinel and cluster topologies and every notebook's Redis then come from that flavour) and reads
the JUnit XML it wrote. One flavour at a time: they would share the CPU otherwise. Prints passed /
failed / skipped per flavour and writes ``reports/matrix/summary.{md,json}`` beside each flavour's
log and XML. Tests in ``tests/test_flavour_matrix.py``.

Subsets (``--subset``): ``all`` is the whole suite and every notebook; ``redis`` the Redis-facing
test files named below and every notebook; ``faults`` only the fault tests (kill -9 under load,
restart, Sentinel and cluster failover) and the 8.2 commands.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from labs.launcher import binaries, flavours
from labs.launcher.errors import LauncherError
from labs.report import make_console

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
FAULT_TESTS = (
    "tests/test_worker_crash.py",  # kill -9 of a worker under load, restart
    "tests/test_persistence.py",  # kill -9 of Redis with and without AOF, restart
    "tests/test_replication.py",
    "tests/test_failover.py",  # Sentinel failover, graceful and kill -9
    "tests/test_failover_window.py",
    "tests/test_cluster_faults.py",  # cluster failover under the sharded worker
    "tests/test_topology.py",
    "tests/test_cluster.py",
    "tests/test_acked_trim.py",
    "tests/test_flavours.py",
)
REDIS_TESTS = (
    *FAULT_TESTS,
    "tests/test_reader.py",
    "tests/test_read_loop.py",
    "tests/test_acks.py",
    "tests/test_rescuer.py",
    "tests/test_rescuers.py",
    "tests/test_claiming.py",
    "tests/test_pool_and_dlq.py",
    "tests/test_dlq.py",
    "tests/test_dlq_move.py",
    "tests/test_idempotency.py",
    "tests/test_idempotency_cases.py",
    "tests/test_worker.py",
    "tests/test_producer.py",
    "tests/test_shutdown.py",
    "tests/test_drain.py",
    "tests/test_streams_info.py",
    "tests/test_eviction.py",
    "tests/test_operator_info.py",
    "tests/test_metrics.py",
    "tests/test_connection.py",
    "tests/test_cluster_worker.py",
    "tests/test_latency.py",
    "tests/test_monitoring.py",  # the INFO fields the exporter and the alerts read
)
SUBSETS = ("all", "redis", "faults")
RESULT_LINE = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
TOTAL_LINE = re.compile(r"(?:collected|\[)\s*(\d+) items?")


@dataclass
class FlavourResult:
    flavour: str
    server: str = ""
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    elapsed_s: float = 0.0
    problem: str = ""  # why it did not run at all
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problem and self.failed == 0 and self.errors == 0


def paths_for(subset: str) -> list[str]:
    """The test files (and notebooks) a subset runs."""
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    if subset == "all":
        return ["tests", *notebooks]
    if subset == "redis":
        return [*REDIS_TESTS, *notebooks]
    if subset == "faults":
        return list(FAULT_TESTS)
    raise ValueError(f"unknown subset {subset!r}; choose one of {', '.join(SUBSETS)}")


def read_junit(path: Path, result: FlavourResult) -> None:
    """Count passed / failed / errors / skipped from pytest's JUnit XML (every ``testsuite``)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for case in (c for s in suites for c in s.iter("testcase")):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None:
            result.failed += 1
            result.failures.append(name)
        elif case.find("error") is not None:
            result.errors += 1
            result.failures.append(name)
        elif case.find("skipped") is not None:
            result.skipped += 1
        else:
            result.passed += 1


def server_banner(flavour: str) -> str:
    """``Redis 8.2.3 (/path/redis-server)`` for the flavour, or why it cannot be had."""
    previous = os.environ.get(flavours.FLAVOUR_VAR)
    os.environ[flavours.FLAVOUR_VAR] = flavour
    try:
        path = binaries.require("redis-server")
        product = flavours.FLAVOURS[flavour].product
        return f"{product} {'.'.join(map(str, binaries.version(path)))}"
    finally:
        if previous is None:
            os.environ.pop(flavours.FLAVOUR_VAR, None)
        else:
            os.environ[flavours.FLAVOUR_VAR] = previous


def _follow(log_path: Path, proc: subprocess.Popen[bytes], progress: Progress, task: TaskID) -> None:
    """Advance the bar as pytest prints ``PASSED`` / ``FAILED`` ... lines into its log."""
    done = 0
    with log_path.open("r", errors="replace") as stream:
        while True:
            line = stream.readline()
            if not line:
                if proc.poll() is not None:
                    return
                time.sleep(0.5)
                continue
            if (total := TOTAL_LINE.search(line)) and "items" in line:
                progress.update(task, total=int(total.group(1)))
            elif RESULT_LINE.search(line) and ("::" in line or ".ipynb" in line):
                done += 1
                progress.update(task, completed=done)


def run_flavour(
    flavour: str, subset: str, out: Path, workers: int, extra: Sequence[str], progress: Progress
) -> FlavourResult:
    """Install the flavour, run pytest on it, read its results."""
    result = FlavourResult(flavour)
    setup = subprocess.run(["bash", str(ROOT / "scripts/ensure-flavour.sh"), flavour], capture_output=True, text=True)
    if setup.returncode != 0:
        result.problem = (setup.stderr.strip().splitlines() or ["setup failed"])[-1]
        return result
    try:
        result.server = server_banner(flavour)
    except LauncherError as err:
        result.problem = str(err)
        return result
    xml, log_path = out / f"{flavour}.xml", out / f"{flavour}.log"
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", f"--junitxml={xml}"]
    if workers > 0:
        args += ["-n", str(workers), "--dist", "loadfile"]
    args += [*paths_for(subset), "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=120", *extra]
    env = os.environ | {flavours.FLAVOUR_VAR: flavour}
    env.pop("REDIS_URL", None)  # each flavour's session spawns its own servers
    task = progress.add_task(f"{flavour} ({result.server})", total=None)
    started = time.monotonic()
    with log_path.open("wb") as sink:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        follower = threading.Thread(target=_follow, args=(log_path, proc, progress, task), daemon=True)
        follower.start()
        proc.wait()
        follower.join(timeout=5)
    result.elapsed_s = time.monotonic() - started
    if xml.exists():
        read_junit(xml, result)
    else:
        result.problem = f"pytest wrote no results (exit {proc.returncode}); see {log_path}"
    return result


def summary_table(results: Sequence[FlavourResult], subset: str) -> Table:
    table = Table(title=f"test matrix (subset {subset})", title_justify="left")
    for col in ("flavour", "server", "passed", "failed", "errors", "skipped", "time"):
        table.add_column(col, justify="right" if col in ("passed", "failed", "errors", "skipped", "time") else "left")
    for r in results:
        if r.problem:
            table.add_row(r.flavour, f"[red]{r.problem}[/]", "-", "-", "-", "-", "-")
            continue
        style = "green" if r.ok else "red"
        table.add_row(r.flavour, r.server, f"[{style}]{r.passed}[/]", str(r.failed), str(r.errors), str(r.skipped),
                      f"{r.elapsed_s / 60:.1f} min")
    return table


def to_markdown(results: Sequence[FlavourResult], subset: str) -> str:
    lines = [f"# Test matrix (subset `{subset}`)", "",
             "| flavour | server | passed | failed | errors | skipped | time |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.problem:
            lines.append(f"| {r.flavour} | not run: {r.problem} | - | - | - | - | - |")
        else:
            lines.append(f"| {r.flavour} | {r.server} | {r.passed} | {r.failed} | {r.errors} | {r.skipped} | "
                         f"{r.elapsed_s / 60:.1f} min |")
    for r in results:
        if r.failures:
            lines += ["", f"## Failed on {r.flavour}", "", *(f"- `{name}`" for name in r.failures)]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m labs.flavour_matrix", description=__doc__.split("\n\n")[0])
    p.add_argument("--flavours", default=",".join(flavours.FLAVOURS), help="comma-separated (default: all three)")
    p.add_argument("--subset", choices=SUBSETS, default="all")
    p.add_argument("--workers", type=int, default=3, help="pytest-xdist workers per flavour (0: one process)")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "matrix")
    p.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chosen = [f.strip() for f in args.flavours.split(",") if f.strip()]
    if unknown := [f for f in chosen if f not in flavours.FLAVOURS]:
        build_parser().error(f"unknown flavour(s) {', '.join(unknown)}; use {', '.join(flavours.FLAVOURS)}")
    console = make_console()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for flavour in chosen:
            results.append(run_flavour(flavour, args.subset, args.out, args.workers, args.pytest_args, progress))
    console.print(summary_table(results, args.subset))
    for r in results:
        for name in r.failures:
            console.print(f"[red]failed on {r.flavour}[/]: {name}")
    (args.out / "summary.md").write_text(to_markdown(results, args.subset), encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps([asdict(r) for r in results], indent=2), encoding="utf-8")
    console.print(f"summary: {args.out / 'summary.md'}; logs and JUnit XML per flavour beside it")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
