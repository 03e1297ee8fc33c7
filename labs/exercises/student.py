"""The student edition's safety net: one Russian line for a Redis error, and ``reset("NN.K")``.

The student edition (``make student``) ends its first code cell with ``student_mode()``. From
then on, in that kernel, an error from Redis raised in any cell (the student's own, a check's,
an experiment's) is shown as one line that says what happened and what to run, instead of
redis-py's traceback wall: a dead or missing server names the first cell and ``make up``; an
error reply (``NOGROUP``, ``wrong number of arguments``...) names the line of the cell that got
it and, when the cell belongs to an exercise, the way back to a fresh start (``reset("02.4")``).
Python errors keep their traceback: it is the student's own code that raised.

:func:`reset` runs an exercise's preparing cell again (read from the reference notebook: the
student edition's preparing cells are the same text) in the caller's namespace, so a second
attempt starts from the state the first one found.
"""

from __future__ import annotations

import functools
import linecache
import re
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import nbformat
import redis
from redis.exceptions import RedisClusterException

from labs.exercises.exercise import RERUN_FIRST

SOURCE_DIR = Path(__file__).resolve().parents[2] / "notebooks"  # as edition.SOURCE_DIR, without nbconvert's import
_CHECK_CALL = re.compile(r"^check\(\s*[\"'](?P<id>\d{2}\.\d+)[\"']", re.MULTILINE)

RED, RESET = "\x1b[31m", "\x1b[0m"
SERVER_ERRORS: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
HANDLED: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException)
# redis-py's cluster client raises RedisClusterException both when no node answers and for a command it
# refuses itself (keys of one call in different slots, a command with no key): only these say the former.
CLUSTER_UNREACHABLE = ("cannot be connected", "no redis_connection", "slots are not covered", "could not agree",
                       "no targets were found")


def server_is_down(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis is not there (the first cell must run again), not that a command was refused."""
    if isinstance(exc, SERVER_ERRORS):
        return True
    return isinstance(exc, RedisClusterException) and any(part in str(exc).lower() for part in CLUSTER_UNREACHABLE)


def server_down_message(exc: BaseException) -> str:
    """What a student reads when Redis is not there: the cause in brackets, then what to run."""
    return f"Redis не отвечает ({type(exc).__name__}: {exc}). {RERUN_FIRST}"


def retry_advice(exercise_id: str) -> str:
    """How to start an exercise again from a fresh state (its preparing cell, or ``reset``)."""
    if preparing_source(exercise_id) is None:
        return "Новая попытка: исправьте ячейку с решением и выполните её и проверку снова."
    return (
        f"Новая попытка начинается с чистого состояния: выполните заново ячейку над вашим решением "
        f'(она готовит задание) или `reset("{exercise_id}")`, затем решение и проверку.'
    )


@functools.cache
def _exercise_cells() -> dict[str, dict[str, str]]:
    """Exercise id -> {"prepare": source of its preparing cell, if any}, from the reference notebooks."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(SOURCE_DIR.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:  # type: ignore[no-untyped-call]
            exercise_id = cell.metadata.get("exercise")
            if not exercise_id or cell.cell_type != "code":
                continue
            entry = found.setdefault(exercise_id, {})
            solution = cell.metadata.get("nbgrader", {}).get("solution", False)
            if not solution and not _CHECK_CALL.search(cell.source):
                entry["prepare"] = cell.source
    return found


@functools.cache
def _cell_exercises() -> dict[str, str]:
    """Cell id -> exercise id, over every notebook (the student edition keeps the reference's cell ids)."""
    found: dict[str, str] = {}
    for path in sorted(SOURCE_DIR.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:  # type: ignore[no-untyped-call]
            if exercise_id := cell.metadata.get("exercise"):
                found[cell.get("id", "")] = exercise_id
    return found


def preparing_source(exercise_id: str) -> str | None:
    """The source of the exercise's preparing cell, or None when it has none (the solution builds its own)."""
    return _exercise_cells().get(exercise_id, {}).get("prepare")


def reset(exercise_id: str, namespace: dict[str, object] | None = None) -> None:
    """Run the preparing cell of ``exercise_id`` again (default namespace: the caller's globals)."""
    source = preparing_source(exercise_id)
    if source is None:
        if exercise_id not in _exercise_cells():
            raise KeyError(f"нет задания {exercise_id!r}: номера заданий — как в заголовке проверки, например '02.4'")
        print(f"У задания {exercise_id} нет готовящей ячейки: просто выполните решение и проверку снова.")  # noqa: T201
        return
    names = namespace if namespace is not None else sys._getframe(1).f_globals
    exec(compile(source, f"<подготовка {exercise_id}>", "exec"), names)  # the notebook's own cell
    print(f"Задание {exercise_id} подготовлено заново: выполните ваше решение и проверку.")  # noqa: T201


def _cell_line(tb: TracebackType | None, cell_files: Mapping[str, int]) -> str | None:
    """``строка N: <code>`` of the deepest traceback frame that is a notebook cell."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if filename in cell_files or filename.startswith("<ipython-input"):
            code = linecache.getline(filename, lineno).strip()
            found = f"строка {lineno}: `{code}`" if code else f"строка {lineno}"
    return found


def error_line(
    exc: BaseException,
    tb: TracebackType | None = None,
    *,
    exercise_id: str | None = None,
    cell_files: Mapping[str, int] | None = None,
) -> str:
    """The one line shown for a Redis error raised in a cell (see the module docstring)."""
    if server_is_down(exc):
        return server_down_message(exc)
    where = _cell_line(tb, cell_files or {})
    text = f"Redis ответил ошибкой {type(exc).__name__}: {exc}" + (f" ({where})" if where else "") + "."
    if exercise_id:
        text += " Если это не первая попытка, состояние задания могло израсходоваться. " + retry_advice(exercise_id)
    return text


def _current_exercise(shell: Any) -> str | None:
    """The exercise of the cell being run, from the cell id JupyterLab sends with the request."""
    try:
        cell_id = shell.get_parent()["metadata"].get("cellId")
    except (AttributeError, KeyError, TypeError):
        return None
    return _cell_exercises().get(cell_id) if cell_id else None


def _handler(
    shell: Any, etype: type[BaseException], value: BaseException, tb: TracebackType, tb_offset: int | None = None
) -> list[str]:
    cell_files = getattr(shell.compile, "_filename_map", {})
    line = error_line(value, tb, exercise_id=_current_exercise(shell), cell_files=cell_files)
    stb = [f"{RED}{line}{RESET}"]
    shell._showtraceback(etype, value, stb)
    return stb


def student_mode(shell: Any = None) -> bool:
    """Install the one-line display of Redis errors in this IPython; False outside IPython."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc(HANDLED, _handler)
    return True
