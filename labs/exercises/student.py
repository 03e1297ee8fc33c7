"""The student edition's safety net: one Russian line for a Redis error or a wait that ran out, clean attempts,
and ``reset("NN.K")``.

The student edition (``make student``) ends its first code cell with ``student_mode()``. From
then on, in that kernel:

- an error from Redis raised in any cell (the student's own, a check's, an experiment's) is shown as
  one line that says what happened and what to run, instead of redis-py's traceback wall: a dead or
  missing server names the first cell and ``make up``; an error reply (``NOGROUP``, ``wrong number of
  arguments``...) names the line of the cell that got it and, when the cell belongs to an exercise,
  how to try again;
- a wait with a deadline that ran out (``wait_until`` of ``labs.polling``, ``asyncio.wait_for``) is one
  line too: what was awaited, for how long, what was seen last, and the cell's line that waited;
- every run of an exercise's solution cell starts from a clean slate and its check judges only that
  run (:mod:`labs.exercises.attempts`).

Python errors of the student's own code keep their traceback.

:func:`reset` prepares an exercise afresh by hand: what its earlier attempt left running is stopped,
its answer variables deleted, its preparing cell (read from the reference notebook: the student
edition's preparing cells are the same text) run again in the caller's namespace.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from labs import polling
from labs.exercises import attempts
from labs.exercises.attempts import preparing_source
from labs.exercises.exercise import RERUN_FIRST

__all__ = ["error_line", "preparing_source", "reset", "retry_advice", "student_mode", "timeout_line"]

RED, RESET = "\x1b[31m", "\x1b[0m"
SERVER_ERRORS: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
HANDLED: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, TimeoutError)
# redis-py's cluster client raises RedisClusterException both when no node answers and for a command it
# refuses itself (keys of one call in different slots, a command with no key): only these say the former.
CLUSTER_UNREACHABLE = ("cannot be connected", "no redis_connection", "slots are not covered", "could not agree",
                       "no targets were found")
POLLING = str(Path(polling.__file__).resolve())


def server_is_down(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis is not there (the first cell must run again), not that a command was refused."""
    if isinstance(exc, SERVER_ERRORS):
        return True
    return isinstance(exc, RedisClusterException) and any(part in str(exc).lower() for part in CLUSTER_UNREACHABLE)


def server_down_message(exc: BaseException) -> str:
    """What a student reads when Redis is not there: the cause in brackets, then what to run."""
    return f"Redis не отвечает ({type(exc).__name__}: {exc}). {RERUN_FIRST}"


def retry_advice(exercise_id: str) -> str:
    """How to start an exercise again from a fresh state (its solution cell prepares it again by itself)."""
    if preparing_source(exercise_id) is None:
        return "Новая попытка: исправьте ячейку с решением и выполните её и проверку снова."
    return (
        "Новая попытка: исправьте решение и выполните его ячейку и проверку снова — попытка начнётся с чистого "
        f'состояния сама (ячейка над вашим решением выполнится заново; вручную — она же или `reset("{exercise_id}")`).'
    )


def reset(exercise_id: str, namespace: dict[str, object] | None = None) -> None:
    """Prepare ``exercise_id`` afresh: stop what its earlier attempt left running, delete its answers, run its
    preparing cell again (default namespace: the caller's globals)."""
    if exercise_id not in attempts.exercise_ids():
        raise KeyError(f"нет задания {exercise_id!r}: номера заданий — как в заголовке проверки, например '02.4'")
    book = attempts.current()
    names = namespace if namespace is not None else sys._getframe(1).f_globals
    if book is not None and names is book.namespace:
        book.fresh_start(exercise_id)
    else:  # outside the student edition's kernel: the preparing cell and the answers, nothing to track
        for name in attempts.answer_names(exercise_id):
            names.pop(name, None)
        if (source := preparing_source(exercise_id)) is not None:
            exec(compile(source, f"<подготовка {exercise_id}>", "exec"), names)  # the notebook's own cell
    if preparing_source(exercise_id) is None:
        print(f"У задания {exercise_id} нет готовящей ячейки: просто выполните решение и проверку снова.")  # noqa: T201
        return
    print(f"Задание {exercise_id} подготовлено заново: выполните ваше решение и проверку.")  # noqa: T201


def _cell_line(tb: TracebackType | None, cell_files: Mapping[str, int]) -> str | None:
    """``строка N: <code>`` of the deepest traceback frame that is a notebook cell."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if filename in cell_files or filename.startswith(("<ipython-input", "<подготовка")):
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
    """The one line shown for a Redis error or a wait that ran out, raised in a cell (see the module docstring)."""
    if isinstance(exc, TimeoutError):
        return timeout_line(exc, tb, exercise_id=exercise_id, cell_files=cell_files)
    if server_is_down(exc):
        return server_down_message(exc)
    where = _cell_line(tb, cell_files or {})
    text = f"Redis ответил ошибкой {type(exc).__name__}: {exc}" + (f" ({where})" if where else "") + "."
    if exercise_id:
        text += " " + retry_advice(exercise_id)
    return text


def _waited(tb: TracebackType | None) -> tuple[str, float, object] | None:
    """What a ``labs.polling`` wait waited for, its timeout and the predicate's last value, from its frame."""
    for frame, _ in traceback.walk_tb(tb):
        if str(Path(frame.f_code.co_filename).resolve()) == POLLING and "what" in frame.f_locals:
            local = frame.f_locals
            what = local["what"]
            with contextlib.suppress(Exception):  # a callable names the last state seen; it may fail itself
                what = what() if callable(what) else what
            return str(what), float(local.get("timeout_s", 0.0)), local.get("value")
    return None


def timeout_line(
    exc: BaseException,
    tb: TracebackType | None = None,
    *,
    exercise_id: str | None = None,
    cell_files: Mapping[str, int] | None = None,
) -> str:
    """One line for a wait that ran out: what was expected, for how long, what was seen last, and where."""
    where = _cell_line(tb, cell_files or {})
    waited = _waited(tb)
    if waited is not None:
        what, timeout_s, seen = waited
        text = (f"Не дождались за {timeout_s:g} с: ждали «{what}», а условие так и не выполнилось "
                f"(последний ответ: {seen!r})")
    else:
        text = f"Ожидание не закончилось вовремя ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})"
    text += (f" ({where})" if where else "") + "."
    if exercise_id:
        text += " Так бывает, когда попытка начинается не с того состояния, какое готовит задание. " + retry_advice(
            exercise_id)
    return text


def _current_exercise(shell: Any) -> str | None:
    """The exercise of the cell being run: from the cell id JupyterLab sends with the request, else its text."""
    try:
        cell_id = shell.get_parent()["metadata"].get("cellId")
    except (AttributeError, KeyError, TypeError):
        cell_id = None
    role = attempts.cell_role("", cell_id) if cell_id else None
    book = attempts.current()
    return role[0] if role else (book.cell_exercise if book is not None else None)


def _handler(
    shell: Any, etype: type[BaseException], value: BaseException, tb: TracebackType, tb_offset: int | None = None
) -> list[str]:
    cell_files = getattr(shell.compile, "_filename_map", {})
    line = error_line(value, tb, exercise_id=_current_exercise(shell), cell_files=cell_files)
    stb = [f"{RED}{line}{RESET}"]
    shell._showtraceback(etype, value, stb)
    return stb


def student_mode(shell: Any = None) -> None:
    """Install the one-line display of Redis errors and of waits that ran out, and the clean attempts
    (:mod:`labs.exercises.attempts`), in this IPython; nothing outside IPython. Returns nothing, so the
    first cell of the student edition shows no bare ``True`` under it."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is None:
        return
    shell.set_custom_exc(HANDLED, _handler)
    attempts.install(shell)
