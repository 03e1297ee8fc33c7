"""Lab 3's partition mode (``make lab-3 MODE=partition``, ``python -m labs.lab3 --modes partition``).

A real network partition (:mod:`labs.launcher.netns`, root needed) instead of a kill:

- ``--topology sentinel``: the worker across the split brain (:mod:`labs.experiments.worker_partition`,
  ``--dedupe sqlite`` and ``none`` side by side: confirmed writes lost by Redis, events lost,
  duplicates, downtime, restarts) and what bounds the old master's window
  (:mod:`labs.experiments.split_brain`: ``min-replicas-to-write`` 0 and 1 with two
  ``min-replicas-max-lag`` values, and ``WAIT 1``);
- ``--topology cluster``: the minority side (:mod:`labs.experiments.cluster_minority`: writes the
  cut-off master acknowledged and lost for two ``cluster-node-timeout`` values, the promotion,
  another shard unaffected). The worker rows are measured on Sentinel only.

Every topology runs in namespaces of its own on free ports and is removed at the end. The
report goes to ``reports/lab3-partition-<time>/`` like the other modes'.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from labs.experiments import cluster_minority, split_brain, worker_partition
from labs.launcher import netns
from labs.report import Check, Report, Table, print_report, write_report

WORKER_COLUMNS = (
    "dedupe", "confirmed", "confirmed, gone from Redis", "survived in Redis", "events lost", "duplicated",
    "charged, then gone from Redis", "downtime s", "promoted s", "heal s", "demoted s", "restarts", "warnings a/b",
)


def _worker_table(runs: list[worker_partition.WorkerPartition]) -> Table:
    rows = tuple(
        (r.dedupe, r.confirmed, r.confirmed_gone, r.survived, r.survived_uncharged, r.duplicated, r.charged_gone,
         round(r.downtime_s, 2), round(r.promoted_s, 2), round(r.healed_s, 2), round(r.demoted_s, 2), r.restarts,
         f"{r.warning_lines['a']}/{r.warning_lines['b']}")
        for r in runs
    )
    return Table("partition on sentinel: the worker (min-replicas-to-write 0, the default)", WORKER_COLUMNS, rows)


def _worker_checks(runs: list[worker_partition.WorkerPartition]) -> list[Check]:
    by = {r.dedupe: r for r in runs}
    checks = [
        Check("sqlite: no event charged twice", by["sqlite"].duplicated == 0, f"{by['sqlite'].duplicated} duplicated"),
        Check("none: the duplicates are there to count", by["none"].duplicated > 0,
              f"{by['none'].duplicated} duplicated" if by["none"].duplicated else "the situation did not arise"),
    ]
    for r in runs:
        checks.append(Check(f"{r.dedupe}: every event that survived in Redis was charged", r.survived_uncharged == 0,
                            f"{r.survived_uncharged} of {r.survived} uncharged"))
        checks.append(Check(f"{r.dedupe}: no restart, exit 0 after SIGTERM",
                            r.restarts == 0 and r.exit_codes == (0, 0), f"exit codes {r.exit_codes}"))
    return checks


def _guard_report(guards: list[split_brain.SplitBrainRun]) -> tuple[Table, list[Check]]:
    rows = split_brain.loss_table(guards)
    columns = tuple(rows[0])
    table = Table("what bounds the old master's window (split_brain)", columns,
                  tuple(tuple(r[c] for c in columns) for r in rows))
    checks = []
    for run in guards[1:]:
        lag = run.guard.max_lag_s
        checks.append(Check(f"{run.guard.label}: the window follows the lag", lag - 1 <= run.window_s <= lag + 3.5,
                            f"window {run.window_s:.2f} s, {run.isolated.lost} acked and lost"))
    checks.append(Check("WAIT 1: nothing it confirmed was lost", guards[0].writer("a2").lost == 0,
                        f"{guards[0].writer('a2').lost} lost"))
    return table, checks


def sentinel_report(run_dir: Path, *, quick: bool) -> Report:
    report = Report("lab3-partition", "Lab 3, partition mode on sentinel")
    workers = worker_partition.run_both(run_dir / "workers", partition_s=5.0 if quick else 10.0)
    guards = split_brain.run_guards(run_dir / "guards")
    guard_table, guard_checks = _guard_report(guards)
    report.tables += [_worker_table(workers), guard_table]
    report.checks += [*_worker_checks(workers), *guard_checks]
    report.figures.append(("acknowledged writes per client, the cut, promotion, heal and demotion marked",
                           split_brain.figure(guards, lang="en")))
    report.notes.append("the worker rows run with min-replicas-to-write 0; the second table shows what the "
                        "setting and WAIT 1 change (Redis's side, measured on the same kind of partition)")
    report.data = {"workers": workers, "guards": split_brain.loss_table(guards)}
    return report


def cluster_report(run_dir: Path) -> Report:
    report = Report("lab3-partition", "Lab 3, partition mode on the cluster")
    runs = cluster_minority.run_timeouts(run_dir / "minority")
    rows = cluster_minority.loss_table(runs)
    columns = tuple(rows[0])
    report.tables.append(Table("the minority side: one master cut off with its client", columns,
                               tuple(tuple(r[c] for c in columns) for r in rows)))
    for run in runs:
        t = run.node_timeout_ms / 1000
        report.checks.append(Check(f"node timeout {run.node_timeout_ms} ms: acknowledged for about the timeout",
                                   0.8 * t <= run.window_s <= 1.5 * t + 1.5, f"window {run.window_s:.2f} s"))
        other = run.writer("other")
        report.checks.append(Check(f"node timeout {run.node_timeout_ms} ms: the other shard unaffected",
                                   not other.failed_after(0.0) and other.lost == 0,
                                   f"{len(other.failed_after(0.0))} failed from the cut on, {other.lost} lost"))
    report.figures.append(("acknowledged writes per client, the cut, promotion and heal marked",
                           cluster_minority.figure(runs, lang="en")))
    report.notes.append("on the cluster this mode measures Redis's side (acknowledged writes lost); the worker "
                        "rows are measured on sentinel: make lab-3 MODE=partition")
    report.data = {"runs": rows}
    return report


def run_partition(console: Console, *, topology: str, quick: bool, worker: str | None,
                  reports_dir: Path | None) -> int:
    """The partition mode end to end; the exit code (0 all checks passed, 1 one failed, 2 cannot run)."""
    if (reason := netns.unavailable_reason()) is not None:
        console.print(f"[bold red]error:[/] the partition mode needs real partitions: {escape(reason)}")
        return 2
    if worker:
        os.environ["WORKER"] = worker  # worker_procs.worker_command() reads it, as the other modes do
    console.print(f"lab 3 on {topology}: mode partition (network namespaces in {netns.NETWORK}) ...")
    with tempfile.TemporaryDirectory(prefix="lab3-partition-") as tmp:
        report = sentinel_report(Path(tmp), quick=quick) if topology == "sentinel" else cluster_report(Path(tmp))
    paths = write_report(report, reports_dir)
    print_report(console, report, max_rows=40)
    for note in report.notes:
        console.print(f"- {escape(note)}")
    console.print(f"report: {paths.markdown}, {paths.html}, {paths.json}")
    mine = [n for n in netns.list_namespaces() if n.startswith(f"{netns.PREFIX}-{os.getpid()}x")]
    console.print(f"network namespaces left by this run: {len(mine) or 'none'}")
    verdict = "[bold green]all checks passed[/]" if report.passed else "[bold red]some checks failed[/]"
    console.print(verdict)
    return 0 if report.passed else 1
