"""Attempts: in the student edition, every run of an exercise's solution cell is a clean slate, and a check
judges only that run.

``student_mode()`` (the student edition's first code cell) installs :class:`Attempts` on IPython's
``pre_run_cell`` and ``post_run_cell`` events. From then on each exercise cell is recognised (by the cell id
JupyterLab sends, which the student edition keeps from the reference; without one, by its text: a solution
cell starts with its task's ``# NN.K:`` comment, a preparing cell is the reference's text) and:

- **an attempt starts clean.** When a solution cell runs after an earlier attempt of its exercise (or in a
  kernel where its preparing cell never ran), the attempt is prepared first: what the earlier attempt left
  running is stopped (its child processes killed, its in-kernel workers asked to stop, its threads waited
  for), the exercise's answer variables are deleted, and its preparing cell runs again (keys and files of
  the earlier attempt removed, the situation built afresh). One line says so. Running the preparing cell by
  hand, or ``reset("NN.K")``, does the same. A cell that holds only comments (the blank ``# ваш код``) is no
  attempt: Run All does not use the state up;
- **a check judges the latest run only.** The outcome of the latest run of each solution cell is kept: if it
  raised, :func:`failed_run` says so and the check is red with that error, whatever variables an earlier run
  left in the kernel.

Outside the student edition (the reference notebooks under nbval, the tests of the checks) nothing is
installed and the checks behave as before. The process bookkeeping reads ``/proc`` (Linux); elsewhere the
attempts still start clean in Redis and in the kernel, but stray child processes are not tracked.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import importlib
import io
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from labs import nbtypes
from labs.polling import poll

SOURCE_DIR = Path(__file__).resolve().parents[2] / "notebooks"  # as edition.SOURCE_DIR, without nbconvert's import
Role = Literal["prepare", "solution", "check"]
_CHECK_CALL = re.compile(r"^check\(\s*[\"'](?P<id>\d{2}\.\d+)[\"']", re.MULTILINE)
_TASK_LINE = re.compile(r"\A\s*#\s*(?P<id>\d{2}\.\d+)(?:-[a-z])?:")
THREAD_WAIT_S = 5.0  # how long a new attempt waits for the threads an earlier one left running (a feeder: 1 s)
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class _Cell:
    exercise: str
    role: Role
    source: str


@functools.cache
def _cells() -> dict[str, _Cell]:
    """Cell id -> (exercise, role, source) over the reference notebooks (the student edition keeps the ids)."""
    found: dict[str, _Cell] = {}
    for path in sorted(SOURCE_DIR.glob("*.ipynb")):
        for cell in nbtypes.read(path).cells:
            exercise = cell.metadata.get("exercise")
            if not exercise or cell.cell_type != "code":
                continue
            if cell.metadata.get("nbgrader", {}).get("solution", False):
                role: Role = "solution"
            elif _CHECK_CALL.search(cell.source):
                role = "check"
            else:
                role = "prepare"
            found[str(cell.get("id", ""))] = _Cell(str(exercise), role, str(cell.source))
    return found


def exercise_ids() -> set[str]:
    """Every exercise that has cells in a notebook."""
    return {cell.exercise for cell in _cells().values()}


def preparing_source(exercise_id: str) -> str | None:
    """The source of the exercise's preparing cell, or None when it has none (the solution builds its own)."""
    return next((c.source for c in _cells().values() if c.exercise == exercise_id and c.role == "prepare"), None)


def cell_role(raw_cell: str, cell_id: str | None = None) -> tuple[str, Role] | None:
    """Which exercise a cell belongs to and what it is there, or None for any other cell."""
    known = _cells().get(cell_id or "")
    if known is not None:
        return known.exercise, known.role
    if task := _TASK_LINE.match(raw_cell):
        return task["id"], "solution"
    if check := _CHECK_CALL.search(raw_cell.strip()):
        return check["id"], "check"
    stripped = raw_cell.strip()
    for cell in _cells().values():
        if cell.role == "prepare" and cell.source.strip() == stripped:
            return cell.exercise, "prepare"
    return None


def defined_names(source: str) -> set[str]:
    """The names a cell binds at top level (assignments, defs, imports, loop and ``with`` targets)."""
    names: set[str] = set()
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return names
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def answer_names(exercise_id: str) -> list[str]:
    """The names the exercise's check reads that the student's cell defines (not the preparing cell's)."""
    module = importlib.import_module(f"labs.exercises.nb{exercise_id[:2]}")
    exercise = next((e for e in module.EXERCISES if e.id == exercise_id), None)
    if exercise is None:
        return []
    prepared = defined_names(preparing_source(exercise_id) or "")
    return [name for name in exercise.needs if name not in prepared]


def is_attempt(raw_cell: str) -> bool:
    """Whether a solution cell holds code (the blank of the student edition holds comments only)."""
    try:
        return bool(ast.parse(raw_cell).body)
    except SyntaxError:
        return True  # the student's code, if broken: it is an attempt (and it will fail)


# -- what an attempt leaves running --------------------------------------------------------


def _children() -> dict[int, str]:
    """This process's child processes that still run: pid -> start time (``/proc``; empty elsewhere)."""
    me, found = str(os.getpid()), {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            fields = _stat(int(entry.name))
            if fields and fields[1] == me and fields[0] != "Z":
                found[int(entry.name)] = fields[19]
    return found


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cmdline(pid: int) -> list[str]:
    """A process's command line (``/proc``), or [] when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _kill(pids: dict[int, str]) -> list[int]:
    """SIGKILL the ones that still run as the same process (same start time), and wait for them; those killed."""
    killed = [pid for pid, started in pids.items() if (fields := _stat(pid)) and fields[19] == started
              and fields[0] != "Z"]
    for pid in killed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    poll(lambda: all(map(_gone, killed)), KILL_WAIT_S, poll_s=0.02)
    return killed


def _gone(pid: int) -> bool:
    """Reaped now (our child), or no longer running (gone, or a zombie of another parent)."""
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    fields = _stat(pid)
    return fields is None or fields[0] == "Z"


def _tasks() -> set[asyncio.Task[Any]]:
    try:
        return set(asyncio.all_tasks())
    except RuntimeError:  # no running loop: IPython outside a kernel
        return set()


@dataclass
class Leftovers:
    """What one attempt started that still ran when its cell finished."""

    pids: dict[int, str] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop it all: in-kernel workers asked to stop (others of the cell's tasks cancelled), threads waited
        for (a bounded time), child processes killed."""
        for task in self.tasks:
            if task.done():
                continue
            owner = _task_owner(task)
            if owner is not None:
                owner()
            else:
                task.cancel()
        deadline = time.monotonic() + THREAD_WAIT_S
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        _kill(self.pids)
        self.pids, self.threads, self.tasks = {}, [], []


def _task_owner(task: asyncio.Task[Any]) -> Callable[[], None] | None:
    """The ``request_stop`` of the worker whose ``run()`` the task is (a graceful stop), or None."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    owner = frame.f_locals.get("self") if frame is not None else None
    stop = getattr(owner, "request_stop", None)
    return stop if callable(stop) else None


@dataclass
class _Snapshot:
    pids: dict[int, str]
    threads: set[threading.Thread]
    tasks: set[asyncio.Task[Any]]

    @classmethod
    def now(cls) -> _Snapshot:
        return cls(_children(), set(threading.enumerate()), _tasks())

    def new_since(self, is_user_code: Callable[[str], bool]) -> Leftovers:
        """What runs now that did not before: children, the cell's own threads and tasks (not the kernel's)."""
        pids = {pid: started for pid, started in _children().items() if self.pids.get(pid) != started}
        threads = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()
                   and is_user_code(_code_file(getattr(t, "_target", None)))]
        tasks = [t for t in _tasks() - self.tasks if not t.done()
                 and (_task_owner(t) is not None or is_user_code(_code_file(t.get_coro())))]
        return Leftovers(pids, threads, tasks)


def _code_file(obj: object) -> str:
    code = getattr(obj, "__code__", None) or getattr(obj, "cr_code", None)
    return str(getattr(code, "co_filename", ""))


# -- the record of each exercise --------------------------------------------------------------


@dataclass
class Record:
    """One exercise in this kernel: is its state fresh, how did its latest attempt end, what did it leave."""

    fresh: bool = False  # prepared, and no attempt has run since
    attempts: int = 0
    error: str | None = None  # the latest attempt raised: "NameError: name 'x' is not defined"
    leftovers: Leftovers = field(default_factory=Leftovers)


class Attempts:
    """The bookkeeping of one kernel (see the module docstring); :func:`install` makes one."""

    def __init__(self, shell: Any, carried: dict[str, Record] | None = None) -> None:
        self.shell = shell
        self.records: dict[str, Record] = {}
        for exercise_id, old in (carried or {}).items():  # the first cell ran again: nothing is fresh any more
            self.records[exercise_id] = Record(attempts=old.attempts, leftovers=old.leftovers)
        self._running: tuple[str, Role, _Snapshot | None] | None = None
        self.cell_exercise: str | None = None  # the exercise of the cell being run, if it is one's

    def record(self, exercise_id: str) -> Record:
        return self.records.setdefault(exercise_id, Record())

    # -- IPython's events --

    def pre_run_cell(self, info: Any) -> None:
        self._running = None
        role = cell_role(str(getattr(info, "raw_cell", "") or ""), getattr(info, "cell_id", None))
        self.cell_exercise = role[0] if role else None
        if role is None or role[1] == "check":
            return
        exercise_id, kind = role
        try:
            if kind == "prepare":
                self._tidy(exercise_id)
                self._running = (exercise_id, kind, None)
            elif is_attempt(str(info.raw_cell)):
                if not self.record(exercise_id).fresh:
                    self.fresh_start(exercise_id, announce=True)
                self._running = (exercise_id, kind, _Snapshot.now())
        except Exception as exc:  # never stop the student's cell for our bookkeeping: say it in one line
            print(f"\x1b[31mНе удалось подготовить задание {exercise_id} заново ({type(exc).__name__}: {exc}). "  # noqa: T201
                  f'Выполните ячейку над решением или `reset("{exercise_id}")`.\x1b[0m')

    def post_run_cell(self, result: Any) -> None:
        running, self._running = self._running, None
        if running is None:
            return
        exercise_id, kind, before = running
        record = self.record(exercise_id)
        error = getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
        if kind == "prepare":
            record.fresh = error is None
            return
        record.fresh = False
        record.attempts += 1
        record.error = None if error is None else _describe(error)
        if before is not None:
            record.leftovers = before.new_since(self._is_user_code)

    # -- attempts --

    def fresh_start(self, exercise_id: str, *, announce: bool = False) -> None:
        """Stop what the earlier attempt left, delete the answers, run the preparing cell again (quietly, with
        one line, when ``announce``: the student ran the solution, not this)."""
        self._tidy(exercise_id)
        source = preparing_source(exercise_id)
        if source is not None:
            if announce:
                with contextlib.redirect_stdout(io.StringIO()):
                    self._prepare(exercise_id, source)
            else:
                self._prepare(exercise_id, source)
        self.record(exercise_id).fresh = True
        if announce and source is not None:
            print(f"↻ {exercise_id}: новая попытка с чистого состояния — ячейка над решением выполнена заново, "  # noqa: T201
                  "следы прошлой попытки убраны.")

    def _prepare(self, exercise_id: str, source: str) -> None:
        exec(compile(source, f"<подготовка {exercise_id}>", "exec"), self.namespace)  # the notebook's own cell

    def _tidy(self, exercise_id: str) -> None:
        record = self.record(exercise_id)
        record.leftovers.stop()
        record.error = None
        for name in answer_names(exercise_id):
            self.namespace.pop(name, None)

    @property
    def namespace(self) -> dict[str, Any]:
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def _is_user_code(self, filename: str) -> bool:
        """A file of the notebook's cells (IPython's cell files, an exec'd preparing cell), not a library's."""
        cell_files = getattr(getattr(self.shell, "compile", None), "_filename_map", {}) or {}
        return bool(filename) and (filename in cell_files or filename.startswith("<"))


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


_CURRENT: Attempts | None = None


def install(shell: Any) -> Attempts:
    """Register the bookkeeping on ``shell``'s events (replacing an earlier one: the first cell ran again)."""
    global _CURRENT
    old = _CURRENT
    if old is not None:
        for event, callback in (("pre_run_cell", old.pre_run_cell), ("post_run_cell", old.post_run_cell)):
            with contextlib.suppress(ValueError):
                old.shell.events.unregister(event, callback)
    _CURRENT = Attempts(shell, old.records if old is not None and old.shell is shell else None)
    shell.events.register("pre_run_cell", _CURRENT.pre_run_cell)
    shell.events.register("post_run_cell", _CURRENT.post_run_cell)
    return _CURRENT


def uninstall() -> None:
    """Remove the bookkeeping (the tests' shells)."""
    global _CURRENT
    if _CURRENT is not None:
        for event, callback in (("pre_run_cell", _CURRENT.pre_run_cell), ("post_run_cell", _CURRENT.post_run_cell)):
            with contextlib.suppress(ValueError):
                _CURRENT.shell.events.unregister(event, callback)
    _CURRENT = None


def current() -> Attempts | None:
    return _CURRENT


def failed_run(exercise_id: str) -> str | None:
    """The error the latest run of the exercise's solution cell raised, or None (it succeeded, or nothing
    is recorded: not the student edition)."""
    record = _CURRENT.records.get(exercise_id) if _CURRENT is not None else None
    return record.error if record is not None else None
