"""Helpers for tests/test_exercises_nbNN.py: run an exercise's own cells from the notebook, judge a namespace.

The preparing and reference cells are read from the notebook itself (cell metadata ``exercise``),
so a test exercises the code the student sees. They run in a plain namespace that holds what the
notebook's setup cell would define (``r``, ``P``, ``REDIS_URL``, the common imports); a test adds
what else its notebook's setup provides.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
import redis

from labs.exercises import edition
from labs.exercises.edition import SOURCE_DIR
from labs.exercises.exercise import Verdict, evaluate
from labs.exercises.notebook import find


def notebook_path(number: str) -> Path:
    (path,) = SOURCE_DIR.glob(f"{number}_*.ipynb")
    return path


def cells(exercise_id: str) -> dict[str, str]:
    """``{"prepare": source, "solution": source}`` of an exercise, from its notebook."""
    nb = nbformat.read(notebook_path(exercise_id[:2]), as_version=4)
    found: dict[str, str] = {}
    for cell in nb.cells:
        if cell.metadata.get("exercise") != exercise_id:
            continue
        if edition.is_solution(cell):
            found["solution"] = cell.source
        elif not edition.check_ids(cell.source):
            found["prepare"] = cell.source
    return found


def namespace(client: redis.Redis, prefix: str, redis_url: str, **more: Any) -> dict[str, Any]:
    """What a notebook's first cell defines, give or take: the client, the prefix, the usual imports."""
    ns: dict[str, Any] = {
        "r": client,
        "P": prefix,
        "REDIS_URL": redis_url,
        "time": time,
        "redis": redis,
        "contextlib": contextlib,
        "tempfile": tempfile,
        "Path": Path,
    }
    ns.update(more)
    return ns


def run_cell(source: str, ns: dict[str, Any]) -> dict[str, Any]:
    """Execute a cell's source in ``ns`` (top-level ``await`` allowed, as in IPython)."""
    code = compile(source, "<cell>", "exec", flags=0x2000)  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    result = eval(code, ns)  # a coroutine when the cell awaits
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    return ns


def prepared(exercise_id: str, ns: dict[str, Any]) -> dict[str, Any]:
    """Run the exercise's preparing cell (if it has one) in ``ns``."""
    source = cells(exercise_id).get("prepare")
    return run_cell(source, ns) if source else ns


def solved(exercise_id: str, ns: dict[str, Any]) -> dict[str, Any]:
    """Run the preparing cell and the reference solution in ``ns``."""
    return run_cell(cells(exercise_id)["solution"], prepared(exercise_id, ns))


def verdict(exercise_id: str, ns: dict[str, Any]) -> Verdict:
    return evaluate(find(exercise_id), ns)


def says(exercise_id: str, ns: dict[str, Any], fragment: str) -> None:
    """Assert that the check fails and that its message contains ``fragment``."""
    result = verdict(exercise_id, ns)
    assert not result.passed and fragment in result.message, result.message


def passes(exercise_id: str, ns: dict[str, Any]) -> str:
    result = verdict(exercise_id, ns)
    assert result.passed, result.message
    return result.message
