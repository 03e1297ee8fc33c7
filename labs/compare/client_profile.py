"""cProfile of the publishing client: where the Python side of a windowed publish spends its own time.

:func:`profiled` runs a coroutine under :class:`cProfile.Profile` (the thread of the event loop: the
producer, the client library and its callbacks; in a hold case no consumer runs yet), :func:`top`
reads the functions by own time (``tottime``) as :class:`ProfileLine` rows and the pstats text that
``make compare`` writes beside its report (``profile-<row>.txt``). The time the loop waits for the
broker shows as the poller's own time (``select.epoll.poll``). Own time is wall time (cProfile's
default timer): on a loaded machine it includes the time the client waited for a core inside a
function (a ``send`` system call, say); each resumption of a coroutine counts as a call. cProfile
slows Python code down, so a profiled publish is a run of its own: its rate is not a throughput figure.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import site
import sys
import sysconfig
from collections.abc import Awaitable
from pathlib import Path
from typing import TypedDict, TypeVar

T = TypeVar("T")
TOP_LINES = 25


class ProfileLine(TypedDict):
    function: str
    calls: int
    own_s: float  # tottime: in the function itself, not in what it called
    own_share: float  # of the profiled time in all functions
    cumulative_s: float


async def profiled(awaitable: Awaitable[T]) -> tuple[T, cProfile.Profile]:
    """Await ``awaitable`` with a profiler on this thread; its result and the profiler."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = await awaitable
    finally:
        profiler.disable()
    return result, profiler


def _prefixes() -> list[str]:
    paths = sysconfig.get_paths()
    roots = [*site.getsitepackages(), site.getusersitepackages(), paths["stdlib"], paths["platstdlib"], sys.prefix,
             str(Path.cwd())]
    return sorted({str(Path(r)) + "/" for r in roots if r}, key=len, reverse=True)


def label(file: str, line: int, name: str, prefixes: list[str] | None = None) -> str:
    """``path:line(function)`` with the site-packages, standard library or checkout prefix cut; a built-in
    is its own name."""
    if file == "~" or not file:
        return name.strip("<>")
    for prefix in prefixes or _prefixes():
        if file.startswith(prefix):
            file = file[len(prefix):]
            break
    return f"{file}:{line}({name})"


def top(profiler: cProfile.Profile, limit: int = TOP_LINES) -> tuple[list[ProfileLine], str]:
    """The ``limit`` functions with the most own time, and the pstats listing sorted the same way."""
    # (file, line, name) -> (primitive calls, calls, own time, cumulative time, callers): pstats' own table,
    # which typeshed does not declare (get_stats_profile() keys by name alone and merges namesakes)
    entries: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = vars(pstats.Stats(profiler))["stats"]
    total = sum(tt for _cc, _nc, tt, _ct, _callers in entries.values()) or 1.0
    prefixes = _prefixes()
    ranked = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:limit]
    lines = [ProfileLine(function=label(file, line, name, prefixes), calls=int(nc), own_s=round(tt, 4),
                         own_share=round(tt / total, 3), cumulative_s=round(ct, 4))
             for (file, line, name), (_cc, nc, tt, ct, _callers) in ranked]
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats(pstats.SortKey.TIME).print_stats(limit)
    return lines, buf.getvalue()
