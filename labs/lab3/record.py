"""What a cell leaves behind, read from records the worker does not control.

- the producer's JSON-lines log: every send with its status (``confirmed`` / ``unknown``);
- the SQLite ledger: table ``charges`` (one row per applied charge, never deduplicated);
- Redis: the DLQ ``<stream>:dlq``, the stream itself (what the current master holds),
  ``XPENDING`` and ``XINFO GROUPS`` at the end, and samples of pending and lag while it ran;
- the worker logs, for what only the worker can tell: reclaims and ``drain complete``.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECLAIM = re.compile(r"reclaim.*\btook\b", re.IGNORECASE)
DRAIN = re.compile(r"drain complete", re.IGNORECASE)
COUNT = re.compile(r"\b(errors|reclaimed|processed|dead_lettered)=(\d+)")


@dataclass(frozen=True)
class Send:
    event_id: str
    msg_id: str | None
    t: float
    confirmed: bool


@dataclass(frozen=True)
class ChargeRow:
    event_id: str
    msg_id: str
    consumer: str
    t: float


@dataclass(frozen=True)
class Sample:
    """The group every ``sample_interval_s`` (None: Redis did not answer then)."""

    t: float
    pending: int | None
    lag: int | None


@dataclass(frozen=True)
class LogFacts:
    """What the worker logs say: reclaim lines, ``drain complete`` lines and their counters."""

    reclaims: int
    drain_lines: int
    errors: int | None
    reclaimed: int | None


@dataclass
class CellRecord:
    """Everything collected for one cell once its workers stopped."""

    sends: list[Send]
    charges: list[ChargeRow]
    dlq_events: list[str]
    stream_events: set[str]
    pending_end: int
    pending_end_by_consumer: dict[str, int]
    lag_end: int
    samples: list[Sample]
    logs: LogFacts
    exits: list[dict[str, Any]] = field(default_factory=list)
    t0: float = 0.0
    produce_end: float = 0.0
    fault_t: float | None = None
    promoted_t: float | None = None
    settled_t: float | None = None
    acked_not_done: list[str] | None = None


def read_sends(path: Path) -> list[Send]:
    """The producer's log; a torn last line (the producer was stopped mid-write) is skipped."""
    sends: list[Send] = []
    if not path.exists():
        return sends
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, KeyError):
            r = json.loads(line)
            sends.append(Send(str(r["event_id"]), r.get("msg_id"), float(r["time"]), r["status"] == "confirmed"))
    return sends


def read_charges(ledger: Path) -> list[ChargeRow]:
    """``SELECT event_id, msg_id, consumer, charged_at FROM charges`` (none if no ledger yet)."""
    if not ledger.exists():
        return []
    with contextlib.closing(sqlite3.connect(ledger, timeout=30)) as db:
        try:
            sql = "SELECT event_id, msg_id, consumer, charged_at FROM charges ORDER BY charged_at"
            rows = db.execute(sql).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
    return [ChargeRow(str(e), str(m), str(c), float(t)) for e, m, c, t in rows]


def read_logs(paths: list[Path]) -> LogFacts:
    """Reclaim lines and ``drain complete`` lines (with their counters, summed) in the worker logs."""
    reclaims = drains = 0
    counters: dict[str, int] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        for line in text.splitlines():
            if RECLAIM.search(line):
                reclaims += 1
            if DRAIN.search(line):
                drains += 1
                for name, value in COUNT.findall(line):
                    counters[name] = counters.get(name, 0) + int(value)
    return LogFacts(reclaims, drains, counters.get("errors"), counters.get("reclaimed"))
