"""Lab 1's timings and sizes, with the presets the runner, the checker and the tests use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Lab1Settings:
    """How long and how fast lab 1 runs. The defaults are the course's values.

    ``backlog`` and ``work_ms`` are not in the course (both 0 there): a backlog of events
    written at once before the consumers start, and a pause inside the simulated work, so
    that a demo can show the group's lag rise and drain (notebook 04's panel).
    """

    produce_s: float = 100.0
    produce_interval_ms: int = 100
    backlog: int = 0
    work_ms: int = 0
    maxlen: int = 1000
    block_ms: int = 2000
    count: int = 10
    fail_every: int = 5
    rescue_interval_ms: int = 5000
    min_idle_ms: int = 3000
    drain_timeout_s: float = 30.0
    sample_interval_ms: int = 500
    persistence_writes: int = 2000
    latency_n: int = 20_000

    def __post_init__(self) -> None:
        positive = {
            "produce_s": self.produce_s,
            "produce_interval_ms": self.produce_interval_ms,
            "maxlen": self.maxlen,
            "block_ms": self.block_ms,
            "count": self.count,
            "rescue_interval_ms": self.rescue_interval_ms,
            "min_idle_ms": self.min_idle_ms,
            "drain_timeout_s": self.drain_timeout_s,
            "sample_interval_ms": self.sample_interval_ms,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.backlog < 0 or self.work_ms < 0:
            raise ValueError(f"backlog and work_ms cannot be negative, got {self.backlog}, {self.work_ms}")
        if self.fail_every < 2:
            raise ValueError(f"fail_every must be at least 2, got {self.fail_every}")
        if self.paced_messages < 1:
            raise ValueError("produce_s is shorter than one produce interval: nothing would be sent")

    @property
    def paced_messages(self) -> int:
        """How many events the producer sends one per ``produce_interval_ms``."""
        return int(self.produce_s * 1000 // self.produce_interval_ms)

    @property
    def messages(self) -> int:
        """How many events the producer sends in all: the backlog, then the paced ones."""
        return self.backlog + self.paced_messages

    @property
    def socket_timeout_s(self) -> float:
        """The clients' socket timeout: longer than ``BLOCK`` so that an idle read is not an error."""
        return self.block_ms / 1000 + 5.0


PRESETS: dict[str, Lab1Settings] = {
    # The course's timings: ~100 s of producing, then the drain, persistence and latency.
    "full": Lab1Settings(),
    # The same timings, shorter: about a minute in all.
    "quick": Lab1Settings(produce_s=40.0, persistence_writes=1000, latency_n=5000),
    # Scaled timings for `make check-lab-1` and the tests: seconds instead of minutes.
    # min idle 1 s: far above the instant work, so a consumer that stalls between its work and
    # its XACK (a loaded machine) is not taken for one that never acks.
    "smoke": Lab1Settings(
        produce_s=3.0,
        produce_interval_ms=50,
        block_ms=500,
        rescue_interval_ms=500,
        min_idle_ms=1000,
        drain_timeout_s=8.0,
        sample_interval_ms=200,
        persistence_writes=300,
        latency_n=500,
    ),
}
