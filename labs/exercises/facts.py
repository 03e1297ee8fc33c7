"""What several notebooks' checks read the same way: a stream that must exist, an object of the right
kind, a number in a range, the experiment's processes that must be gone.

Each helper raises :class:`~labs.exercises.exercise.Miss` with a Russian line that says what to
do, never the expected value; ``verify`` functions in ``labs/exercises/nbNN.py`` call them first
and then compare the student's figures with Redis or with the experiment's own record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any

import redis

from labs.exercises.exercise import expect
from labs.launcher.process import is_redis, pid_alive


def stream_exists(client: redis.Redis, key: str, shown: str) -> None:
    """The stream must exist (``EXISTS``); ``shown`` is how the task names it (``P + "ex:rescue"``)."""
    expect(
        client.exists(key),
        f"Стрима `{shown}` нет в Redis: выполните ячейку, которая готовит задание (если она есть), и свою.",
    )


def named_stream(ns: Mapping[str, Any], suffix: str) -> tuple[redis.Redis, str]:
    """The notebook's client and the exercise's stream ``P + suffix``, which must exist."""
    client, stream = ns["r"], ns["P"] + suffix
    stream_exists(client, stream, f'P + "{suffix}"')
    return client, stream


def id_set(value: Any, name: str) -> set[str]:
    """The student's ``name``, a collection of message ids, as a set of strings."""
    of_kind(value, list | tuple | set | frozenset, name, "списком ID записей")
    return {str(v) for v in value}


def of_kind(value: Any, kind: type | UnionType | tuple[type, ...], name: str, what: str) -> None:
    """``value`` (the student's ``name``) must be a ``kind``; ``what`` says in Russian what it should hold."""
    expect(isinstance(value, kind), f"`{name}` должна быть {what}.")


def number(value: Any, name: str) -> float:
    """The student's figure as a float (an int or a float, not a bool or a string)."""
    expect(isinstance(value, int | float) and not isinstance(value, bool), f"`{name}` должна быть числом.")
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
