"""One sample of :class:`labs.panels.dashboard.MetricsDashboard`, and what a run of them says.

A sample holds the worker's numbers (its ``/metrics``), Redis's numbers (``XINFO GROUPS``,
``XPENDING``, the stream's first id) and the rates between two scrapes. :func:`verdict_of`
turns the last few into a phrase for the status line (keeping up, falling behind ...), and
:func:`settled_for` says when a run is over, so a dashboard may stop by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from labs.panels.scrape import WorkerNumbers
from labs.panels.streams_info import StreamStats


@dataclass(frozen=True)
class DashboardSample:
    """One refresh: the worker's numbers, Redis's numbers, and rates since the previous sample."""

    t_s: float
    worker: WorkerNumbers | None
    redis: StreamStats | None
    processed_per_s: float | None = None
    errors_per_s: float | None = None
    processing_lag_s: float | None = None
    problem: str = ""


def rate(now: WorkerNumbers | None, before: WorkerNumbers | None, field: str, dt_s: float) -> float | None:
    """Per-second increase of counter ``field`` between two scrapes (None if either lacks it)."""
    a = None if now is None else getattr(now, field)
    b = None if before is None else getattr(before, field)
    if a is None or b is None or dt_s <= 0:
        return None
    return float(max(0.0, a - b) / dt_s)


FALLING_BEHIND = "отстаёт: lag растёт"
WITH_ERRORS = "успевает, но есть ошибки"
IDLE = "всё разобрано, ждёт новых"
KEEPING_UP = "успевает"
NOT_ANSWERING = "воркер не отвечает"
WAITING = "ждёт первых чисел группы от воркера"


def settled_for(samples: list[DashboardSample], window_s: float) -> bool:
    """The run is over: the worker has processed something, and for at least ``window_s`` since
    then nothing new, nothing pending and no lag (by its own numbers)."""
    last = samples[-1] if samples else None
    if last is None or last.worker is None or not last.worker.processed:
        return False
    done = last.worker.processed
    for sample in reversed(samples):
        w = sample.worker
        if w is None or w.processed != done or w.pending != 0 or w.group_lag != 0:
            return False
        if sample.t_s <= last.t_s - window_s:
            return True
    return False


def verdict_of(samples: list[DashboardSample]) -> str:
    """One phrase for the projector: how the worker is doing over the last few samples."""
    recent = [s for s in samples[-4:] if s.worker is not None]
    if not recent:
        return NOT_ANSWERING
    last = recent[-1].worker
    assert last is not None
    lags = [s.worker.group_lag for s in recent if s.worker and s.worker.group_lag is not None]
    if len(lags) >= 3 and lags[-1] > lags[0] > 0:
        return FALLING_BEHIND
    if (recent[-1].errors_per_s or 0) > 0:
        return WITH_ERRORS
    if last.pending is None and last.group_lag is None:
        return WAITING
    if (last.group_lag or 0) == 0 and (last.pending or 0) == 0:
        return IDLE
    return KEEPING_UP
