"""labs.bench.process_runs: the rate and the CPU of a drain, from the bench's polls (no server needed)."""

from __future__ import annotations

import os

import pytest

from labs.bench import process_runs
from labs.bench.process_runs import MIN_CPU_WINDOW_S, drain_of
from labs.launcher.process import cpu_s


def _polls(n: int, rate: float, cpu_per_msg_s: float | None, every_s: float = 0.005) -> list[process_runs.Sample]:
    """A consumer acking ``rate`` messages a second from t=0, spending ``cpu_per_msg_s`` of CPU on each."""
    samples: list[process_runs.Sample] = []
    t = 0.0
    while True:
        acked = min(n, int(rate * t))
        samples.append((t, acked, None if cpu_per_msg_s is None else 0.2 + acked * cpu_per_msg_s))
        if acked == n:
            return samples
        t += every_s


def test_the_rate_cpu_and_busy_share_over_the_middle_of_the_drain() -> None:
    drain = drain_of(_polls(100_000, 150_000.0, 5e-6), 100_000)
    assert drain.rate == pytest.approx(150_000, rel=0.01)
    assert drain.cpu_us == pytest.approx(5.0, rel=0.01)
    assert drain.busy == pytest.approx(0.75, rel=0.01)  # 5 µs of CPU in every 6.7 µs of wall time


def test_no_cpu_figure_from_a_window_shorter_than_the_kernels_ticks_allow_or_without_proc() -> None:
    short_n = int(150_000 * MIN_CPU_WINDOW_S / 0.8) - 1_000  # a middle 80 % just under the minimum window
    short = drain_of(_polls(short_n, 150_000.0, 5e-6), short_n)
    assert short.rate == pytest.approx(150_000, rel=0.02) and short.cpu_us is None and short.busy is None
    unknown = drain_of(_polls(100_000, 150_000.0, None), 100_000)
    assert unknown.cpu_us is None and unknown.rate == pytest.approx(150_000, rel=0.01)


def test_a_drain_that_never_reaches_the_window_is_an_error_not_a_figure() -> None:
    with pytest.raises(RuntimeError, match="never crossed"):
        drain_of([(0.0, 0, 0.0), (1.0, 10, 0.1)], 100)


def test_the_cpu_of_a_live_process_is_read_and_grows() -> None:
    before = cpu_s(os.getpid())
    assert before is not None and before > 0
    sum(i * i for i in range(300_000))  # some CPU of this process's own
    after = cpu_s(os.getpid())
    assert after is not None and after >= before
    assert cpu_s(2**22 + 12345) is None  # no such process: no figure, no error
