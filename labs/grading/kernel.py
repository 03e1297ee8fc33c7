"""Running a submitted notebook inside the sandbox: a kernel that dies or hangs costs its exercise only.

:class:`ResilientExecute` is the nbclient that :mod:`labs.grading.runner` drives inside the
sandbox (nbgrader is not imported there: the scoring happens outside). On top of nbclient:

- a **dead kernel** (``os._exit``, a segfault, the OOM killer) is recorded as an error output on
  the cell that caused it (:data:`DEAD_KERNEL`, a reason the feedback shows); the rest of that
  exercise's cells (its check included) are marked not run, a fresh kernel re-runs a copy of
  the first code cell (the setup: ``r``, ``P``, ``REDIS_URL``) and the next exercise goes on
  (a notebook's exercises each need only the setup cell: ``notebooks/CONVENTIONS.md``);
- a cell **past its limit** is interrupted (its output says so); a kernel that ignores the
  interrupt is treated as dead;
- a cell's **output** beyond ``output_limit`` bytes is dropped, with one error output saying so;
- each finished cell is handed to ``on_cell`` (the runner reports it on its pipe at once, so a
  notebook stopped at its own limit keeps the cells that ran);
- before a new kernel, ``before_restart`` runs (the runner kills what the old one left and
  makes sure the sandbox's Redis is up).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Callable
from typing import Any

from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode

from labs import nbtypes

log = logging.getLogger(__name__)

DEAD_KERNEL = "DeadKernelError"
CELL_TIMEOUT = "CellTimeoutError"
OUTPUT_LIMIT = "OutputLimitExceeded"
MAX_RESTARTS = 10
INTERRUPT_GRACE_S = 10.0


def error_output(ename: str, evalue: str) -> NotebookNode:
    """An error output as a cell's own would be, with ``evalue`` as its one traceback line."""
    return nbtypes.error_output(ename, evalue, [f"{ename}: {evalue}"])


def dead_kernel_output(index: int) -> NotebookNode:
    """The error output that marks the cell whose run killed the kernel."""
    return error_output(DEAD_KERNEL, f"ядро Python умерло во время ячейки {index}: её результат потерян, "
                                     "дальше — новое ядро")


def not_run_output(dead_index: int, why: str = "ядро умерло") -> NotebookNode:
    """The error output of a cell of the same exercise after the dead one: not run, so no points."""
    return error_output(DEAD_KERNEL, f"не выполнена: {why} в ячейке {dead_index} этого задания")


def timeout_output(cell_timeout_s: int) -> dict[str, Any]:
    """``error_on_timeout`` of nbclient: what a cell past its limit shows."""
    evalue = f"ячейка не закончилась за {cell_timeout_s} с и была прервана"
    return {"ename": CELL_TIMEOUT, "evalue": evalue, "traceback": [f"{CELL_TIMEOUT}: {evalue}"]}


class ResilientExecute(NotebookClient):
    """nbclient with a fresh kernel (setup cell re-run) after a cell kills or hangs the kernel."""

    def __init__(self, nb: NotebookNode, *, cell_timeout_s: int, output_limit: int,
                 on_cell: Callable[[int, NotebookNode], None] = lambda index, cell: None,
                 before_restart: Callable[[], None] = lambda: None, **kwargs: Any) -> None:
        super().__init__(
            nb, timeout=cell_timeout_s, interrupt_on_timeout=True, error_on_timeout=timeout_output(cell_timeout_s),
            allow_errors=True, raise_on_iopub_timeout=False, iopub_timeout=min(30, cell_timeout_s),
            shutdown_kernel="immediate", extra_arguments=["--HistoryManager.hist_file=:memory:"], **kwargs)
        self.on_cell_executed = self._record_reply_error
        self.output_limit = output_limit
        self.on_cell = on_cell
        self.before_restart = before_restart
        self.restarts = 0
        self._output_bytes: dict[int, int] = {}

    def execute_notebook(self) -> NotebookNode:
        """Run every cell (see the module docstring); the notebook with its outputs."""
        self.reset_execution_trackers()
        setup_index = next((i for i, cell in enumerate(self.nb.cells) if cell.cell_type == "code"), None)
        start: int | None = 0
        while start is not None and self.restarts <= MAX_RESTARTS:
            start = self._run_from(start, setup_index)
            if start is not None:
                self.restarts += 1
                self.before_restart()
        return self.nb

    def _run_from(self, start: int, setup_index: int | None) -> int | None:
        """Run cells ``start..`` in one kernel; the index to resume at after a death, else None."""
        with self.setup_kernel():
            assert self.kc is not None
            info = self.wait_for_reply(self.kc.kernel_info())
            if info:
                self.nb.metadata["language_info"] = info["content"]["language_info"]
            if start and setup_index is not None and setup_index < start:
                self._replay_setup(setup_index)
            for index in range(start, len(self.nb.cells)):
                cell = self.nb.cells[index]
                try:
                    self.execute_cell(cell, index, store_history=True)
                except DeadKernelError:
                    log.warning("the kernel died in cell %d; going on in a new kernel", index)
                    cell.setdefault("outputs", []).append(dead_kernel_output(index))
                    return self._skip_rest_of_exercise(index)
                self._finish_cell(index)
                if self._timed_out(cell) and not self._kernel_responds(INTERRUPT_GRACE_S):
                    log.warning("the kernel ignored the interrupt of cell %d; going on in a new kernel", index)
                    return self._skip_rest_of_exercise(index, reported=True, why="ядро не ответило на прерывание")
        return None

    def _finish_cell(self, index: int) -> None:
        cell = self.nb.cells[index]
        if self._output_bytes.get(index, 0) > self.output_limit:
            cell.outputs.append(error_output(OUTPUT_LIMIT, f"вывод ячейки больше {self.output_limit // 1024} КБ: "
                                                           "остальное отброшено (предел песочницы проверки)"))
        if cell.cell_type == "code":
            self.on_cell(index, cell)

    @staticmethod
    def _timed_out(cell: NotebookNode) -> bool:
        return any(output.get("ename") == CELL_TIMEOUT for output in cell.get("outputs", []))

    def _kernel_responds(self, timeout_s: float) -> bool:
        """Whether the kernel answers ``kernel_info`` within ``timeout_s`` (a cell that ignored the interrupt
        keeps it busy)."""
        client = self.kc
        assert client is not None
        msg_id = client.kernel_info()

        async def reply() -> bool:
            try:
                while True:
                    msg = await asyncio.wait_for(client.shell_channel.get_msg(), timeout_s)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        return True
            except TimeoutError:
                return False

        return bool(run_sync(reply)())

    def _skip_rest_of_exercise(self, index: int, *, reported: bool = False, why: str = "ядро умерло") -> int:
        """Mark the dead cell's exercise's later code cells as not run; the index of the next exercise's first."""
        if not reported:
            self.on_cell(index, self.nb.cells[index])
        exercise = self.nb.cells[index].get("metadata", {}).get("exercise")
        resume = index + 1
        while exercise and resume < len(self.nb.cells) and self.nb.cells[resume].metadata.get("exercise") == exercise:
            cell = self.nb.cells[resume]
            if cell.cell_type == "code":
                cell.outputs = [not_run_output(index, why)]
                self.on_cell(resume, cell)
            resume += 1
        return resume

    def _replay_setup(self, setup_index: int) -> None:
        """Run a copy of the setup cell in the new kernel (the notebook keeps the first run's outputs)."""
        replay = copy.deepcopy(self.nb.cells[setup_index])
        try:
            self.execute_cell(replay, setup_index, store_history=False)
        except DeadKernelError:
            log.warning("the kernel died again while re-running the setup cell")

    def output(self, outs: list[NotebookNode], msg: dict[str, Any], display_id: str | None,
               cell_index: int) -> NotebookNode | None:
        """nbclient's, until the cell's output passes ``output_limit`` bytes; then nothing more is kept."""
        used = self._output_bytes.get(cell_index, 0) + len(json.dumps(msg.get("content", {})))
        self._output_bytes[cell_index] = used
        if used > self.output_limit:
            return None
        out: NotebookNode | None = super().output(outs, msg, display_id, cell_index)
        return out

    @staticmethod
    def _record_reply_error(cell: NotebookNode, cell_index: int, execute_reply: dict[str, Any]) -> None:
        """An error reply whose error no output shows (a timeout) becomes an output, as nbgrader's Execute does."""
        content = execute_reply["content"]
        if content["status"] != "error":
            return
        if any(out.output_type == "error" and out.ename == content["ename"] for out in cell.outputs):
            return
        cell.outputs.append(nbtypes.error_output(content["ename"], content.get("evalue", ""),
                                                 content.get("traceback") or [content["ename"]]))
