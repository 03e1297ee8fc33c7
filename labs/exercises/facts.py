"""What several notebooks' checks read the same way: a stream that must exist, an object of the right
kind, a number in a range, the experiment's processes that must be gone.

Each helper raises :class:`~labs.exercises.exercise.Miss` with a Russian line that says what to
do, never the expected value; ``verify`` functions in ``labs/exercises/nbNN.py`` call them first
and then compare the student's figures with Redis or with the experiment's own record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

import redis

from labs.exercises.exercise import Miss, expect
from labs.launcher.process import is_redis, pid_alive

T = TypeVar("T")


def stream_exists(client: redis.Redis, key: str, shown: str) -> None:
    """The stream must exist (``EXISTS``); ``shown`` is how the task names it (``P + "ex:rescue"``)."""
    expect(
        client.exists(key),
        f"Стрима `{shown}` нет в Redis: выполните ячейку, которая готовит задание (если она есть), и свою.",
    )


def made(ns: Mapping[str, object], name: str, kind: type[T]) -> T:
    """What the notebook's own cells made as ``name`` (``r``, ``P``, ``RUN_DIR``, a preparing cell's objects).

    ``evaluate`` has checked the name is there; anything but a ``kind`` under it is no cell of this course
    (a check would trip over it at once), and the ``TypeError`` says so in the verdict's generic line.
    """
    value = ns[name]
    if not isinstance(value, kind):
        raise TypeError(f"{name} is a {type(value).__name__}, not the {kind.__name__} the notebook makes")
    return value


def client_of(ns: Mapping[str, object]) -> redis.Redis:
    """The notebook's client ``r``."""
    return made(ns, "r", redis.Redis)


def prefix_of(ns: Mapping[str, object]) -> str:
    """The notebook's key prefix ``P``."""
    return made(ns, "P", str)


def run_dir_of(ns: Mapping[str, object]) -> Path:
    """The notebook's directory of its own servers and files, ``RUN_DIR``."""
    return made(ns, "RUN_DIR", Path)


def named_stream(ns: Mapping[str, object], suffix: str) -> tuple[redis.Redis, str]:
    """The notebook's client and the exercise's stream ``P + suffix``, which must exist."""
    r, stream = client_of(ns), prefix_of(ns) + suffix
    stream_exists(r, stream, f'P + "{suffix}"')
    return r, stream


def id_set(value: object, name: str) -> set[str]:
    """The student's ``name``, a collection of message ids, as a set of strings."""
    if not isinstance(value, list | tuple | set | frozenset):
        raise Miss(f"`{name}` должна быть списком ID записей.")
    return {str(v) for v in value}


def of_kind(value: object, kind: type[T] | tuple[type[T], ...], name: str, what: str) -> T:
    """``value`` (the student's ``name``) must be a ``kind`` (or one of them); ``what`` says in Russian what it
    should hold. Returns ``value`` as that kind."""
    if not isinstance(value, kind):
        raise Miss(f"`{name}` должна быть {what}.")
    return value


def iterable(value: object) -> Iterable[object]:
    """``value`` as something to iterate over; what ``iter()`` raises for anything else (a check that iterates a
    notebook's object, as the preparing cell made it, reads it through this)."""
    if not isinstance(value, Iterable):
        raise TypeError(f"'{type(value).__name__}' object is not iterable")
    return value


def to_call(value: object) -> Callable[..., object]:
    """``value`` as a function to call; what calling anything else raises."""
    if not callable(value):
        raise TypeError(f"'{type(value).__name__}' object is not callable")
    return value


def number(value: object, name: str) -> float:
    """The student's figure as a float (an int or a float, not a bool or a string)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise Miss(f"`{name}` должна быть числом.")
    return float(value)


def still_running(run_dir: Path, under: str) -> list[str]:
    """Redis processes started under ``run_dir / under`` (their pid files) that still run."""
    running = []
    for pidfile in sorted((run_dir / under).rglob("*.pid")) if (run_dir / under).exists() else []:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            if pid_alive(pid) and is_redis(pid):
                running.append(pidfile.stem)
    return running


def stopped(run_dir: Path, under: str) -> None:
    """Nothing the exercise started under ``run_dir / under`` may still run (it stops in its own cell)."""
    left = still_running(run_dir, under)
    expect(
        not left,
        f"Серверы опыта всё ещё работают ({', '.join(left)}): остановите их в той же ячейке "
        "(`finally` с `stop()` или выход из `with`), иначе они переживут ноутбук.",
    )
