"""The lab's phases in order, with the topology restored between them.

:func:`run_phases` builds each mode's cells (every strategy, and for ``failover`` each
strategy with and without ``WAIT 1``), runs them as one :class:`~labs.lab3.scenario.Phase`
and measures them. After a failover the launcher has already restarted the old master as a
replica; ``launcher.ensure`` waits until the topology is whole again before the next phase.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from labs.lab3.cell import Cell
from labs.lab3.cluster_site import ClusterDeployment
from labs.lab3.contract import WorkerSpec
from labs.lab3.deployment import Deployment, Fault, SentinelDeployment
from labs.lab3.measure import CellResult, measure
from labs.lab3.record import CellRecord
from labs.lab3.scenario import Notify, Phase
from labs.lab3.settings import Lab3Settings
from labs.launcher.topology import default_run_dir

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One cell's result with what the charts need (first repeat only is drawn)."""

    repeat: int
    variant: str
    strategy: str
    result: CellResult
    record: CellRecord
    home: Path
    worker: str = ""
    run_id: str = ""

    @property
    def stream(self) -> str:
        """The cell's stream name as the run used it (``lab3:<run>:r<repeat>:<cell>:orders``)."""
        return f"lab3:{self.run_id}:r{self.repeat}:{self.home.name}:orders"

    @property
    def mode(self) -> str:
        """The mode this cell ran in: ``failover+wait`` is the failover mode's second variant."""
        return self.variant.split("+")[0]


@dataclass
class PhaseTiming:
    mode: str
    repeat: int
    durations_s: dict[str, float]
    fault: Fault


@dataclass
class LabRuns:
    settings: Lab3Settings
    worker: str
    run_id: str
    home: Path
    runs: list[Run] = field(default_factory=list)
    workers: dict[str, str] = field(default_factory=dict)
    phases: list[PhaseTiming] = field(default_factory=list)
    total_s: float = 0.0
    topology: str = "sentinel"


def make_cells(mode: str, run_id: str, home: Path, site: Deployment, specs: dict[str, WorkerSpec],
               s: Lab3Settings) -> list[Cell]:
    """The cells of one mode: worker x (WAIT) x strategy, each in a folder of its own under ``home``."""
    waits = (False, True) if mode == "failover" else (False,)
    cells = []
    for label, spec in specs.items():
        for wait in waits:
            for strategy in s.strategies:
                cell = Cell(mode, strategy, wait, run_id, home, site, spec, s, worker=label)
                cell.home = home / cell.name
                cells.append(cell)
    return cells


def run_phases(s: Lab3Settings, specs: WorkerSpec | dict[str, WorkerSpec], notify: Notify | None = None,
               home: Path | None = None, site: Deployment | None = None) -> LabRuns:
    """Every mode x repeat, in order; returns the measured runs and the phase timings.

    ``specs`` is the worker under test, or several by label (``{"mine": ..., "reference": ...}``),
    each with cells of its own in the same phases.
    """
    specs = specs if isinstance(specs, dict) else {"": specs}
    site = site or SentinelDeployment()
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
    base = home or default_run_dir() / "lab3" / run_id
    label = "; ".join(f"{k}: {v.label}" if k else v.label for k, v in specs.items())
    runs = LabRuns(s, label, run_id, base, workers={k: v.label for k, v in specs.items()}, topology=site.name)
    started = time.monotonic()
    total = s.repeat * len(s.modes)
    for index, (repeat, mode) in enumerate(itertools.product(range(1, s.repeat + 1), s.modes)):
        restore_started = time.monotonic()
        site.ensure()
        restore_s = time.monotonic() - restore_started
        cells = make_cells(mode, f"{run_id}:r{repeat}", base / f"r{repeat}", site, specs, s)
        phase = Phase(mode, cells, s, site, _overall(notify, index, total)).run()
        phase.durations_s = {"topology ready": round(restore_s, 2), **phase.durations_s}
        runs.phases.append(PhaseTiming(mode, repeat, phase.durations_s, phase.fault))
        for cell, record in phase.records:
            result = measure(mode, cell.strategy, record, cell.worker)
            runs.runs.append(Run(repeat, cell.variant, cell.strategy, result, record, cell.home, cell.worker, run_id))
    site.ensure()
    runs.total_s = time.monotonic() - started
    return runs


DEPLOYMENTS: dict[str, type[Deployment]] = {d.name: d for d in (SentinelDeployment, ClusterDeployment)}


def deployment(topology: str) -> Deployment:
    """The lab's site for a topology name: ``sentinel`` (the default) or ``cluster``."""
    if topology not in DEPLOYMENTS:
        raise ValueError(f"unknown topology {topology!r}: {' or '.join(DEPLOYMENTS)}")
    return DEPLOYMENTS[topology]()


def _overall(notify: Notify | None, index: int, total: int) -> Notify | None:
    """A phase's progress as part of the whole run: ``[2/9] failover: load 12/30 s``."""
    if notify is None:
        return None
    outer = notify
    return lambda text, fraction: outer(f"[{index + 1}/{total}] {text}", (index + fraction) / total)


def delete_keys(runs: LabRuns, site: Deployment | None = None) -> int:
    """Delete the run's keys (streams, DLQs, dedupe markers, shard registries); returns how many."""
    site = site or deployment(runs.topology)
    site.ensure()
    client = site.client()
    try:
        keys = list(client.scan_iter(match=f"*lab3:{runs.run_id}:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        return len(keys)
    finally:
        client.close()


def copy_records(runs: LabRuns, folder: Path) -> None:
    """Copy every cell's logs and ledger beside the report (``cells/r<N>/<cell>/``)."""
    for run in runs.runs:
        target = folder / "cells" / f"r{run.repeat}" / run.home.name
        shutil.copytree(run.home, target, dirs_exist_ok=True)

