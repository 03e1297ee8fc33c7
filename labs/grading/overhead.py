"""What the sandbox costs one notebook: the same solved notebook run in turn in a sandbox and without, paired.

``python -m labs.grading overhead --notebooks 02,05 --runs 6`` builds the small release of each
notebook, fills in the reference's answers, and runs it ``runs`` times each way, alternating
(sandboxed, unsandboxed, sandboxed, ...), so both see the same machine; for each way it prints the
median wall time of a run, of its start-up (launch to the runner's Redis answering) and of its
first cell (the kernel's start and the setup cell), and the difference per run. No nbgrader, no
feedback: the kernel's run alone, which is what the sandbox wraps.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labs import nbtypes
from labs.grading import bwrap, course, demo
from labs.grading.limits import Limits
from labs.grading.sandbox import RunReport, Sandbox, SandboxSpec

FIRST_CELL = re.compile(r"cell \d+ done in ([0-9.]+) s")


@dataclass(frozen=True)
class Sample:
    contained: bool
    notebook: str
    wall_s: float
    start_s: float
    first_cell_s: float
    finished: bool


def _first_cell_s(report: RunReport) -> float:
    match = FIRST_CELL.search(Path(report.log_path).read_text(encoding="utf-8", errors="replace"))
    return float(match.group(1)) if match else 0.0


def measure(references: Sequence[Path], runs: int, work: Path, limits: Limits | None = None) -> list[Sample]:
    """``runs`` paired runs of each notebook's solved small release (sandboxed first, then unsandboxed)."""
    limits = limits or Limits()
    pool = bwrap.UidPool(1)
    samples = []
    for reference in references:
        small = course.small_notebook(reference, work / "small" / reference.name)
        released = nbtypes.reads(course.student_release(small))
        solved = demo.solved(released, nbtypes.read(small))
        path = work / "solved" / reference.name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbtypes.write(solved, path)
        release_dir = work / "release"
        release_dir.mkdir(exist_ok=True)
        nbtypes.write(released, release_dir / reference.name)
        for index in range(2 * runs):
            contained = index % 2 == 0
            spec = SandboxSpec(str(work / f"run-{reference.stem}-{index}"), limits.to_json(), contained,
                               pool.base if contained else os.getuid(), str(release_dir), str(work / "logs"))
            report = Sandbox(spec).run(f"{reference.stem}-{index}", "notebook", notebook=path,
                                       wall_s=limits.notebook_timeout_s, on_event=lambda event: None)
            samples.append(Sample(contained, reference.stem, report.wall_s, report.ready_s or 0.0,
                                  _first_cell_s(report), report.finished))
    return samples


def summary(samples: Sequence[Sample]) -> list[str]:
    """One line per way and one for the difference, medians over every run."""
    lines = []
    medians = {}
    for contained in (True, False):
        mine = [s for s in samples if s.contained == contained]
        if not mine:
            continue
        med = tuple(statistics.median(getattr(s, f) for s in mine) for f in ("wall_s", "start_s", "first_cell_s"))
        medians[contained] = med
        way = "sandboxed  " if contained else "unsandboxed"
        failed = sum(not s.finished for s in mine)
        lines.append(f"{way}: {len(mine)} runs, median {med[0]:.2f} s a run (start {med[1]:.2f} s, kernel and "
                     f"setup cell {med[2]:.2f} s){f', {failed} did not finish' if failed else ''}")
    if len(medians) == 2:
        diff = [a - b for a, b in zip(medians[True], medians[False], strict=True)]
        lines.append(f"the sandbox's cost: {diff[0]:+.2f} s a run (start {diff[1]:+.2f} s, kernel and setup cell "
                     f"{diff[2]:+.2f} s), {100 * diff[0] / medians[False][0]:+.0f} %")
    return lines


def main(references: Sequence[Path], runs: int) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="grading-overhead-") as tmp:
        return summary(measure(references, runs, Path(tmp)))
