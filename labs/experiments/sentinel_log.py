"""Sentinel's events on its own clock, read from its log.

A Pub/Sub listener sees an event when its own event loop gets to it: on a loaded machine that
can be seconds after Sentinel acted, and a wait measured between two late sights is off by the
difference of their delays. Sentinel writes every event it publishes to its log too, stamped
with the same clock (``mstime()``, milliseconds) its timers compare, so a wait measured between
two log lines is the one Sentinel itself counted. A line looks like::

    12424:X 07 Dec 2026 02:08:58.971 * +convert-to-slave slave 127.0.0.1:15424 ... @ mymaster ...

``+promoted-slave``, ``+switch-master`` and ``+tilt``/``-tilt`` are logged at level warning, ``+convert-to-slave`` at
notice: all of them at Sentinel's default ``loglevel notice``. The rest of the line names what the
event is about (``slave 127.0.0.1:15424 ...`` for a conversion): a sentinel can convert another
server than the one a reader waits for, say a slow sentinel re-converting a replica that rejoined a
moment ago, so :func:`first_sights` takes a filter. Tests in ``tests/test_sentinel_log.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

WATCHED = ("+promoted-slave", "+switch-master", "+convert-to-slave", "+tilt", "-tilt")

_MONTHS = {name: i for i, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
# pid:role day month year hh:mm:ss.mmm level event ...
_LINE = re.compile(r"^\d+:\w (\d{1,2}) (\w{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2})\.(\d{3}) [.\-*#] (\S+) ?(.*)$")


@dataclass(frozen=True)
class LoggedEvent:
    """One event line: its name, Sentinel's wall-clock time (s since the epoch, ms precision) and what
    it is about, as Sentinel wrote it (``slave 127.0.0.1:15424 127.0.0.1 15424 @ mymaster ...``)."""

    event: str
    at_wall_s: float
    detail: str = ""


def parse_line(line: str) -> LoggedEvent | None:
    """The event of one Sentinel log line, if it is one of :data:`WATCHED` (local time, as Redis writes it)."""
    match = _LINE.match(line)
    if not match or match[8] not in WATCHED or match[2] not in _MONTHS:
        return None
    day, year, hour, minute, second, ms = (int(match[i]) for i in (1, 3, 4, 5, 6, 7))
    stamp = datetime(year, _MONTHS[match[2]], day, hour, minute, second, ms * 1000)  # local, like the log
    return LoggedEvent(match[8], stamp.timestamp(), match[9].strip())


def events(lines: Iterable[str], since_wall_s: float) -> list[LoggedEvent]:
    """The watched events logged at or after ``since_wall_s`` (less 1 ms: the log keeps milliseconds)."""
    parsed = (parse_line(line) for line in lines)
    return [e for e in parsed if e is not None and e.at_wall_s >= since_wall_s - 0.001]


def read_events(logfile: Path, since_wall_s: float) -> list[LoggedEvent]:
    """:func:`events` of a log file ([] if it is not there)."""
    try:
        text = logfile.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return events(text.splitlines(), since_wall_s)


def first_sights(
    logged: list[LoggedEvent], since_wall_s: float, keep: Callable[[str, str], bool] = lambda event, detail: True
) -> dict[str, float]:
    """Each event's first time in the log, in s from ``since_wall_s``; only the events that
    ``keep(event, detail)`` accepts count."""
    first: dict[str, float] = {}
    for e in logged:
        if keep(e.event, e.detail):
            first.setdefault(e.event, e.at_wall_s - since_wall_s)
    return first
