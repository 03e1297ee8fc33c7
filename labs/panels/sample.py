"""One refresh of a live panel: the figures a :class:`~labs.panels.panel.StreamPanel` draws."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PanelSample:
    """One refresh: seconds since start, XLEN, XPENDING per consumer, group lag, stream age."""

    t_s: float
    length: int
    pending_by_consumer: dict[str, int] = field(default_factory=dict)
    lag: int | None = None
    stream_age_ms: int | None = None

    @property
    def pending(self) -> int:
        """The pending entries of the consumers shown (all of them unless capped)."""
        return sum(self.pending_by_consumer.values())
