"""The panels' sampling thread on its own, with a tiny subclass (no Redis: the base never talks to it)."""

from __future__ import annotations

import threading
import time

import pytest

from labs.panels.monitor import MonitorThread

pytestmark = pytest.mark.timeout(30)


class Ticker(MonitorThread[float]):
    """Records the elapsed time of every successful sample; fails the first ``fail_first`` attempts."""

    max_backoff_s = 0.16

    def __init__(self, *, refresh_s: float = 0.01, max_duration_s: float = 10.0, fail_first: int = 0,
                 stop_after: int | None = None) -> None:
        super().__init__(refresh_s=refresh_s, max_duration_s=max_duration_s)
        self.fail_first = fail_first
        self.stop_after = stop_after
        self.attempts: list[float] = []  # monotonic time of every attempt, failed or not
        self.resets = self.opened = self.finished = 0
        self.threads: set[str] = set()

    def _sample(self, elapsed_s: float) -> bool:
        self.attempts.append(time.monotonic())
        self.threads.add(threading.current_thread().name)
        if len(self.attempts) <= self.fail_first:
            return False
        self._append(elapsed_s)
        return True

    def _early_stop_reason(self) -> str | None:
        if self.stop_after is not None and len(self.samples) >= self.stop_after:
            return "enough"
        return None

    def _reset(self) -> None:
        self.resets += 1
        self.attempts = []

    def _open(self) -> None:
        self.opened += 1

    def _finish(self) -> None:
        self.finished += 1


def test_stops_by_itself_after_max_duration() -> None:
    ticker = Ticker(max_duration_s=0.3).start()
    assert ticker.wait_stopped(5)
    assert ticker.stop_reason == "max_duration_s=0.3"
    assert ticker.samples and all(t < 0.3 for t in ticker.samples)
    assert (ticker.opened, ticker.finished) == (1, 1)
    assert ticker.threads == {"Ticker"}  # sampled from its own thread, named by _thread_name()


def test_stop_takes_one_last_sample() -> None:
    ticker = Ticker(refresh_s=10.0).start()
    assert ticker.wait_for_samples(1)
    ticker.stop()  # the thread waits up to 10 s between samples; stop() wakes it at once
    assert not ticker.running and ticker.stop_reason == "stop()"
    first, last = ticker.samples
    assert last > first
    assert ticker.finished == 1


def test_an_early_stop_reason_ends_the_run_without_a_last_sample() -> None:
    ticker = Ticker(stop_after=3).start()
    assert ticker.wait_stopped(5)
    assert ticker.stop_reason == "enough"
    assert len(ticker.samples) == 3
    ticker.stop()  # after a self-stop: harmless, keeps the reason
    assert ticker.stop_reason == "enough"


def test_failures_back_off_doubling_up_to_the_cap() -> None:
    ticker = Ticker(refresh_s=0.01)
    assert [ticker._backoff_s(n) for n in (1, 2, 3, 4, 5, 50, 10_000)] == [0.02, 0.04, 0.08, 0.16, 0.16, 0.16, 0.16]


def test_the_thread_waits_longer_after_each_failure_then_recovers() -> None:
    ticker = Ticker(refresh_s=0.01, fail_first=4).start()
    try:
        assert ticker.wait_for_samples(3)
    finally:
        ticker.stop()
    gaps = [b - a for a, b in zip(ticker.attempts, ticker.attempts[1:], strict=False)]
    # After failure n the pause is at least refresh_s * 2**n (a loaded machine only adds to it).
    for n, gap in enumerate(gaps[:4], start=1):
        assert gap >= 0.9 * min(0.16, 0.01 * 2**n), (n, gaps)
    assert len(ticker.samples) >= 3  # sampling resumed once Redis (here: the subclass) answered


def test_stop_is_idempotent_and_start_is_a_no_op_while_running() -> None:
    ticker = Ticker()
    ticker.stop()  # before start: harmless
    assert ticker.stop_reason is None and not ticker.running
    assert ticker.start() is ticker
    assert ticker.start() is ticker
    assert ticker.resets == 1
    assert ticker.wait_for_samples(2)
    ticker.stop()
    ticker.stop()
    assert not ticker.running and ticker.stop_reason == "stop()"
    assert (ticker.opened, ticker.finished) == (1, 1)
    count = len(ticker.samples)
    assert not ticker.wait_for(lambda samples: len(samples) > count, timeout_s=0.2)  # stopped: nothing new


def test_restart_resets_samples_and_reason() -> None:
    with Ticker() as ticker:
        assert ticker.wait_for_samples(5)
    first_run = ticker.samples
    ticker.start()
    try:
        assert ticker.stop_reason is None and ticker.resets == 2
        assert ticker.wait_for_samples(1)
        assert ticker.samples[0] < first_run[-1]  # elapsed time starts again from 0
    finally:
        ticker.stop()
    assert ticker.stop_reason == "stop()" and ticker.finished == 2


def test_refresh_and_duration_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Ticker(refresh_s=0)
    with pytest.raises(ValueError, match="positive"):
        Ticker(max_duration_s=-1)
