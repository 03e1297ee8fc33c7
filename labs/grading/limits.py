"""What one submission may use while it is graded: time, memory, processes, disk, output.

One frozen :class:`Limits` travels from the command line (``python -m labs.grading grade
--cell-timeout-s ... --memory-mb ...``) to the sandbox (:mod:`labs.grading.sandbox`, which turns
the resource limits into a cgroup, rlimits and a size-limited tmpfs) and into the runner inside
it (:mod:`labs.grading.runner`, which enforces the cell limit and the output limit). Each limit a
runaway cell meets is named in its feedback (:func:`labs.grading.execute.limit_hint`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How long, how much and how many one submission may take while it is graded."""

    cell_timeout_s: int = 120
    notebook_timeout_s: int = 900
    lab_timeout_s: int = 600
    memory_mb: int = 2048  # the sandbox as a whole (cgroup): the kernel, its Redis, everything they start
    nproc: int = 512  # processes and threads of the sandbox's uid (a notebook's cluster takes about 150)
    disk_mb: int = 512  # its home, work folder and /tmp together (one tmpfs)
    output_kb: int = 4096  # what one cell may print or display; the rest is cut off with a note

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"every limit must be positive: {field.name}={getattr(self, field.name)}")
        if self.cell_timeout_s > self.notebook_timeout_s:
            raise ValueError("a cell's limit cannot exceed the notebook's")

    @property
    def address_space_bytes(self) -> int:
        """RLIMIT_AS of each process: the memory limit plus what threads and malloc arenas reserve but never use
        (an ipykernel's VmPeak is 1.3-1.6 GB at 150-180 MB resident). One huge allocation fails at once with
        MemoryError; a slow climb meets the cgroup's limit."""
        return (self.memory_mb + 2048) * MB

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU of each process: the notebook's wall limit (a cell's own limit is wall time)."""
        return max(self.notebook_timeout_s, self.lab_timeout_s)

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Limits:
        return cls(**{field.name: int(data[field.name]) for field in dataclasses.fields(cls) if field.name in data})


def describe(limits: Limits) -> str:
    """One line for the console and the logs."""
    return (f"cell {limits.cell_timeout_s} s, notebook {limits.notebook_timeout_s} s, lab {limits.lab_timeout_s} s, "
            f"memory {limits.memory_mb} MB, {limits.nproc} processes, disk {limits.disk_mb} MB, "
            f"output {limits.output_kb} KB per cell")
