"""Lab 3's timings and sizes, the modes and the dedupe strategies, with the presets the runner uses.

The course's values: a producer at 50 events/s, three workers, 50 ms of work, every 7th
attempt fails, a rescuer with min idle 2 minutes and metrics every 10 s. The lab keeps the
rate, the work and the failures; it scales the rescuer's min idle down (2 minutes would make
one run last many minutes) and says by how much in the report.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

MODES = ("normal", "failover", "sigterm")
STRATEGIES = ("none", "redis", "sqlite")
FAILOVER_KINDS = ("hard", "graceful")
COURSE_MIN_IDLE_MS = 120_000
COURSE_METRICS_INTERVAL_S = 10.0
WORKERS = ("billing-1", "billing-2", "billing-3")


@dataclass(frozen=True, kw_only=True)
class Lab3Settings:
    """How long and how fast lab 3 runs. Durations of one phase are seconds from its start."""

    rate: float = 50.0
    handler_delay_ms: int = 50
    fail_every: int = 7
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
            "repeat": self.repeat,
        }
        problems = [f"{name} must be positive, got {value}" for name, value in positive.items() if value <= 0]
        if self.fault_at_s >= min(self.produce_s, self.failover_produce_s):
            problems.append("fault_at_s must come before the producer stops")
        if self.failover not in FAILOVER_KINDS:
            problems.append(f"failover must be one of {FAILOVER_KINDS}, got {self.failover!r}")
        problems += [f"unknown strategy {s!r}" for s in self.strategies if s not in STRATEGIES]
        problems += [f"unknown mode {m!r}" for m in self.modes if m not in MODES]
        if not self.strategies or not self.modes:
            problems.append("give at least one strategy and one mode")
        if problems:
            raise ValueError("invalid lab 3 settings: " + "; ".join(problems))

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
    # About 3.5 minutes on 2 cores: 40 s of load per mode, 60 s around the failover.
    "full": Lab3Settings(),
    # About 1.5-2 minutes: the same rates, shorter load.
    "quick": Lab3Settings(produce_s=12.0, failover_produce_s=22.0, fault_at_s=6.0, restart_after_s=2.0),
}
