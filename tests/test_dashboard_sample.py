"""What a run of dashboard samples says: the verdict in words, and when the run is over."""

from __future__ import annotations

import math

import pytest

from labs.panels.dashboard_sample import (
    FALLING_BEHIND,
    IDLE,
    KEEPING_UP,
    NOT_ANSWERING,
    WAITING,
    WITH_ERRORS,
    DashboardSample,
    rate,
    settled_for,
    verdict_of,
)
from labs.panels.scrape import WorkerNumbers

pytestmark = pytest.mark.timeout(10)


def at(t: float, lag: float, errors_per_s: float = 0.0, pending: float = 1, processed: float = 0) -> DashboardSample:
    numbers = WorkerNumbers(group_lag=lag, pending=pending, processed=processed)
    return DashboardSample(t, numbers, None, errors_per_s=errors_per_s)


def test_verdicts() -> None:
    assert verdict_of([]) == NOT_ANSWERING
    assert verdict_of([DashboardSample(0, None, None, problem="down")]) == NOT_ANSWERING
    assert verdict_of([at(0, 1), at(1, 3), at(2, 9)]) == FALLING_BEHIND
    assert verdict_of([at(0, 0), at(1, 0, 2.0)]) == WITH_ERRORS
    assert verdict_of([at(0, 0, pending=0)]) == IDLE
    assert verdict_of([at(0, 2), at(1, 1)]) == KEEPING_UP
    assert verdict_of([DashboardSample(0, WorkerNumbers(processed=0), None)]) == WAITING


def test_rate_between_two_scrapes() -> None:
    before, now = WorkerNumbers(processed=10), WorkerNumbers(processed=40)
    assert rate(now, before, "processed", 0.5) == 60.0
    assert rate(now, None, "processed", 0.5) is None
    assert rate(now, before, "errors", 0.5) is None  # not exported
    assert rate(before, now, "processed", 0.5) == 0.0  # a restarted worker's counter: never negative


def test_settled_only_after_work_and_a_quiet_window() -> None:
    quiet = [at(t / 10, 0, pending=0, processed=50) for t in range(0, 11)]  # 0.0 .. 1.0 s
    assert settled_for(quiet, 1.0)
    assert not settled_for(quiet, 1.5)  # not quiet for long enough yet
    assert not settled_for([at(t / 10, 0, pending=0) for t in range(11)], 0.5)  # nothing processed yet
    busy = [*quiet[:-1], at(1.0, 0, pending=0, processed=51)]
    assert not settled_for(busy, 0.5)  # still processing
    pending = [*quiet[:-3], *(at(t / 10, 0, pending=2, processed=50) for t in (8, 9, 10))]
    assert not settled_for(pending, 0.5)
    assert not settled_for([], 0.5)
    unknown = [*quiet[:-1], at(1.0, math.nan, pending=0, processed=50)]  # the worker cannot tell its lag
    assert not settled_for(unknown, 0.5) and verdict_of(unknown) == KEEPING_UP


def test_an_unknown_lag_reads_as_a_question_mark() -> None:
    from labs.panels.dashboard import _n

    assert (_n(None), _n(math.nan), _n(3.0)) == ("-", "?", "3")
