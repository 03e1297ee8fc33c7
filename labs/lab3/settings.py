"""Lab 3's timings and sizes, the modes and the dedupe strategies, with the presets the runner uses.

The course's values: a producer at 50 events/s, three workers, 50 ms of work, every 7th
attempt fails, a rescuer with min idle 2 minutes and metrics every 10 s. The lab keeps the
rate, the work and the failures; it scales the rescuer's min idle down (2 minutes would make
one run last many minutes) and says by how much in the report.

The modes: ``normal`` (no fault: only the handler's failures), ``crash`` (``kill -9`` of one
worker while it holds charged but unacknowledged messages), ``failover`` (the master dies
under load; the producer re-sends what it could not confirm) and ``sigterm`` (one worker is
stopped gracefully and started again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

MODES = ("normal", "crash", "failover", "sigterm")
STRATEGIES = ("none", "redis", "sqlite")
FAILOVER_KINDS = ("hard", "graceful")
COURSE_MIN_IDLE_MS = 120_000
COURSE_METRICS_INTERVAL_S = 10.0
VICTIM = "billing-2"  # the worker the crash and SIGTERM modes hit


@dataclass(frozen=True, kw_only=True)
class Lab3Settings:
    """How long and how fast lab 3 runs. Durations of one phase are seconds from its start."""

    rate: float = 50.0
    workers: int = 3
    handler_delay_ms: int = 50
    fail_every: int = 7
    max_attempts: int = 5
    resend: int = 5
    min_idle_ms: int = 3000
    claim_interval_ms: int = 1000
    block_ms: int = 1000
    metrics_interval_s: float = 2.0
    drain_timeout_s: float = 10.0
    wait_timeout_ms: int = 500
    produce_s: float = 40.0
    failover_produce_s: float = 60.0
    fault_at_s: float = 15.0
    restart_after_s: float = 3.0
    settle_timeout_s: float = 45.0
    sample_interval_s: float = 0.5
    crash_pause_ms: int = 500
    crash_tries: int = 12
    failover: str = "hard"
    strategies: tuple[str, ...] = STRATEGIES
    modes: tuple[str, ...] = MODES
    repeat: int = 1

    def __post_init__(self) -> None:
        positive = {
            "rate": self.rate,
            "min_idle_ms": self.min_idle_ms,
            "claim_interval_ms": self.claim_interval_ms,
            "block_ms": self.block_ms,
            "metrics_interval_s": self.metrics_interval_s,
            "produce_s": self.produce_s,
            "failover_produce_s": self.failover_produce_s,
            "fault_at_s": self.fault_at_s,
            "settle_timeout_s": self.settle_timeout_s,
            "sample_interval_s": self.sample_interval_s,
            "crash_pause_ms": self.crash_pause_ms,
            "crash_tries": self.crash_tries,
            "max_attempts": self.max_attempts,
            "repeat": self.repeat,
        }
        problems = [f"{name} must be positive, got {value}" for name, value in positive.items() if value <= 0]
        if self.fault_at_s >= min(self.produce_s, self.failover_produce_s):
            problems.append("fault_at_s must come before the producer stops")
        if not 2 <= self.workers <= 9:
            problems.append(f"workers must be 2..9 (the crash and SIGTERM modes stop {VICTIM}), got {self.workers}")
        if self.resend < 0:
            problems.append(f"resend cannot be negative, got {self.resend}")
        if self.stall_ms < self.sample_interval_s * 1000:
            problems.append("min_idle_ms / 2 must be at least one sample interval, or a failed delivery can be "
                            "reclaimed before the sampler sees it")
        if self.failover not in FAILOVER_KINDS:
            problems.append(f"failover must be one of {FAILOVER_KINDS}, got {self.failover!r}")
        problems += [f"unknown strategy {s!r}" for s in self.strategies if s not in STRATEGIES]
        problems += [f"unknown mode {m!r}" for m in self.modes if m not in MODES]
        if not self.strategies or not self.modes:
            problems.append("give at least one strategy and one mode")
        if problems:
            raise ValueError("invalid lab 3 settings: " + "; ".join(problems))

    @property
    def consumers(self) -> tuple[str, ...]:
        """The workers' consumer names: ``billing-1``, ``billing-2`` ..."""
        return tuple(f"billing-{i}" for i in range(1, self.workers + 1))

    @property
    def stall_ms(self) -> int:
        """A delivery Redis shows unacknowledged this long counts as a failed attempt (half of min idle:
        the lab's work takes 50 ms, and the sampler sees it at least once before the rescuer may take it)."""
        return self.min_idle_ms // 2

    @property
    def min_idle_scale(self) -> float:
        """How many times shorter the rescuer's min idle is than the course's 2 minutes."""
        return COURSE_MIN_IDLE_MS / self.min_idle_ms

    def produce_s_for(self, mode: str) -> float:
        return self.failover_produce_s if mode == "failover" else self.produce_s

    def with_options(self, **changes: Any) -> Lab3Settings:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


PRESETS: dict[str, Lab3Settings] = {
    # 40 s of load per mode, 60 s around the failover (see the README for the measured times).
    "full": Lab3Settings(),
    # The same rates, shorter load.
    "quick": Lab3Settings(produce_s=12.0, failover_produce_s=22.0, fault_at_s=6.0, restart_after_s=2.0),
    # The tests' scale: two workers per cell, a lower rate and a shorter min idle, so that several
    # workers can run side by side in one short phase each. Not shorter than 2.5 s: the crash mode
    # reads the victim's pending entries 0.3 s after its kill, about 1.2 s after their delivery; on a
    # loaded machine a 1.5 s min idle let another worker's rescuer claim and ack them first, and the
    # kill read as "never held" (CI, full suite).
    "smoke": Lab3Settings(rate=30.0, workers=2, produce_s=8.0, failover_produce_s=16.0, fault_at_s=2.5,
                          restart_after_s=1.0, min_idle_ms=2500, claim_interval_ms=500, block_ms=500,
                          drain_timeout_s=5.0, settle_timeout_s=30.0, sample_interval_s=0.25, crash_tries=8),
}
