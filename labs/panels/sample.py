"""One refresh of a live panel: the figures a :class:`~labs.panels.panel.StreamPanel` draws."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PanelSample:
    """One refresh: seconds since start, XLEN, XPENDING per consumer, group lag, ages.

    ``stream_age_ms`` is how old the stream's oldest entry is (how much history it keeps);
    ``oldest_pending_age_ms`` is how old the oldest unacknowledged entry is (how long the
    oldest work has been waiting; None when the PEL is empty).
    """

    t_s: float
    length: int
    pending_by_consumer: dict[str, int] = field(default_factory=dict)
    lag: int | None = None
    stream_age_ms: int | None = None
    oldest_pending_age_ms: int | None = None

    @property
    def pending(self) -> int:
        """The pending entries of the consumers shown (all of them unless capped)."""
        return sum(self.pending_by_consumer.values())
