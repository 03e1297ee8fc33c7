"""nbgrader's ``Execute`` that survives a dead kernel: that cell loses, the rest is still graded.

nbgrader 0.9 runs a notebook in one kernel; when it dies (``os._exit``, a segfault, the OOM
killer) nbclient raises ``DeadKernelError`` and nbgrader drops the whole notebook. A
notebook's exercises each need only the setup cell and their own cells
(``notebooks/CONVENTIONS.md``), so :class:`ResilientExecute` records the death as an error
output on the cell that caused it (:data:`DEAD_KERNEL`, a reason the feedback shows), marks the
rest of that exercise's cells (its check included) as not run, starts a fresh kernel, re-runs a
copy of the first code cell (the setup: ``r``, ``P``, ``REDIS_URL``) and goes on with the next
exercise. Everything else is nbgrader's: timeouts interrupt the cell
(``interrupt_on_timeout``), errors are allowed, scores come from the outputs.
"""

from __future__ import annotations

import copy
import logging

from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute

log = logging.getLogger(__name__)

DEAD_KERNEL = "DeadKernelError"
MAX_RESTARTS = 10


def dead_kernel_output(index: int) -> NotebookNode:
    """The error output that marks the cell whose run killed the kernel."""
    output: NotebookNode = new_output(  # type: ignore[no-untyped-call]
        "error",
        ename=DEAD_KERNEL,
        evalue=f"ядро Python умерло во время ячейки {index}: её результат потерян, дальше — новое ядро",
        traceback=[f"{DEAD_KERNEL}: ядро умерло (ячейка {index}); следующие ячейки выполнены в новом ядре"],
    )
    return output


def not_run_output(dead_index: int) -> NotebookNode:
    """The error output of a cell of the same exercise after the dead one: not run, so no points."""
    output: NotebookNode = new_output(  # type: ignore[no-untyped-call]
        "error",
        ename=DEAD_KERNEL,
        evalue=f"не выполнена: ядро умерло в ячейке {dead_index} этого задания",
        traceback=[f"{DEAD_KERNEL}: не выполнена (ядро умерло в ячейке {dead_index} этого задания)"],
    )
    return output


class ResilientExecute(Execute):  # type: ignore[misc]
    """``Execute`` with a fresh kernel (setup cell re-run) after a cell kills the kernel."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, object] | None = None,
                   km: KernelManager | None = None) -> tuple[NotebookNode, dict[str, object]]:
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        setup_index = next((i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"), None)
        start: int | None = 0
        restarts = 0
        while start is not None and restarts <= MAX_RESTARTS:
            start = self._run_from(start, setup_index, resources)
            restarts += start is not None
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _run_from(self, start: int, setup_index: int | None, resources: dict[str, object] | None) -> int | None:
        """Run cells ``start..`` in one kernel; the index to resume at after a death, else None."""
        with self.setup_kernel():
            info = self.wait_for_reply(self.kc.kernel_info())
            self.nb.metadata["language_info"] = info["content"]["language_info"]
            if start and setup_index is not None and setup_index < start:
                self._replay_setup(setup_index)
            for index in range(start, len(self.nb.cells)):
                try:
                    self.preprocess_cell(self.nb.cells[index], resources, index)
                except DeadKernelError:
                    log.warning("the kernel died in cell %d; going on in a new kernel", index)
                    self.nb.cells[index].setdefault("outputs", []).append(dead_kernel_output(index))
                    return self._skip_rest_of_exercise(index)
        return None

    def _skip_rest_of_exercise(self, index: int) -> int:
        """Mark the dead cell's exercise's later code cells as not run; the index of the next exercise's first."""
        exercise = self.nb.cells[index].get("metadata", {}).get("exercise")
        resume = index + 1
        while exercise and resume < len(self.nb.cells) and self.nb.cells[resume].metadata.get("exercise") == exercise:
            cell = self.nb.cells[resume]
            if cell.cell_type == "code":
                cell.outputs = [not_run_output(index)]
            resume += 1
        return resume

    def _replay_setup(self, setup_index: int) -> None:
        """Run a copy of the setup cell in the new kernel (the notebook keeps the first run's outputs)."""
        replay = copy.deepcopy(self.nb.cells[setup_index])
        try:
            self.execute_cell(replay, setup_index, store_history=False)
        except DeadKernelError:
            log.warning("the kernel died again while re-running the setup cell")
