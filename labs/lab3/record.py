"""What a cell leaves behind, read from records the worker does not control.

- the producer's JSON-lines log: every attempt with its status (``confirmed`` / ``unknown`` /
  ``refused``) and its number (1 = first send, 2 and more = re-sends of the same event);
- the SQLite ledger: table ``charges`` (one row per applied charge, never deduplicated);
- Redis: the DLQ ``<stream>:dlq``, the stream itself (what the current master holds),
  ``XPENDING`` and ``XINFO GROUPS`` at the end, and samples of pending, lag and every pending
  entry's delivery count while it ran;
- how each worker process ended (exit code or signal) and whether it wrote a line containing
  ``drain complete`` to its output: the one thing the lab reads from a worker's output.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from labs.lab3.deliveries import PelSample
from solutions.ledger import read_rows

DRAIN = re.compile(r"drain complete", re.IGNORECASE)


@dataclass(frozen=True)
class Send:
    """One attempt of the producer's (``attempt`` 1 is the first send of ``event_id``)."""

    event_id: str
    msg_id: str | None
    t: float
    status: str
    attempt: int = 1

    @property
    def confirmed(self) -> bool:
        return self.status == "confirmed"


@dataclass(frozen=True)
class ChargeRow:
    event_id: str
    msg_id: str
    consumer: str
    t: float
    order_id: str = ""


@dataclass(frozen=True)
class Sample:
    """The group every ``sample_interval_s`` (None: Redis did not answer then)."""

    t: float
    pending: int | None
    lag: int | None


@dataclass
class CrashRecord:
    """The crash mode's kill: how many tries it took to catch the worker holding charged but
    unacknowledged messages, which ones it held when it was stopped, and which of them were
    still pending once it was dead (Redis and the ledger, read after the kill)."""

    consumer: str
    tries: int = 0
    caught: bool = False
    killed_t: float | None = None
    held_at_stop: list[str] = field(default_factory=list)
    held_after_kill: list[str] = field(default_factory=list)
    pending_after_kill: int = 0


@dataclass
class CellRecord:
    """Everything collected for one cell once its workers stopped."""

    sends: list[Send]
    charges: list[ChargeRow]
    dlq_events: list[str]
    stream_entries: dict[str, list[str]]
    pending_end: int
    pending_end_by_consumer: dict[str, int]
    lag_end: int
    samples: list[Sample]
    pels: list[PelSample] = field(default_factory=list)
    exits: list[dict[str, object]] = field(default_factory=list)
    t0: float = 0.0
    produce_end: float = 0.0
    fault_t: float | None = None
    promoted_t: float | None = None
    replica_back_t: float | None = None  # a failover's old master back as a replica: the topology whole again
    settled_t: float | None = None
    acked_not_done: list[str] | None = None
    crash: CrashRecord | None = None
    stall_ms: int = 1500
    shards: tuple[str, ...] = ()  # on a cluster: the stream's shards (ids are qualified by their index)
    hit_shards: tuple[int, ...] = ()  # of them, those whose master the failover took away

    @property
    def stream_events(self) -> set[str]:
        """The event ids the stream holds at the end (on the master of the moment)."""
        return set(self.stream_entries)


def read_sends(path: Path) -> list[Send]:
    """The producer's log; a torn last line (the producer was stopped mid-write) is skipped."""
    sends: list[Send] = []
    if not path.exists():
        return sends
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            r = json.loads(line)
            sends.append(Send(str(r["event_id"]), r.get("msg_id"), float(r["time"]), str(r["status"]),
                              int(r.get("attempt") or 1)))
    return sends


def event_outcomes(sends: list[Send]) -> dict[str, str]:
    """Each event's outcome by its best attempt: confirmed, else refused if every attempt was, else unknown."""
    statuses: dict[str, set[str]] = {}
    for s in sends:
        statuses.setdefault(s.event_id, set()).add(s.status)
    return {e: "confirmed" if "confirmed" in st else "refused" if st == {"refused"} else "unknown"
            for e, st in statuses.items()}


def read_charges(ledger: Path) -> list[ChargeRow]:
    """``SELECT event_id, msg_id, consumer, charged_at FROM charges`` (none if no ledger yet)."""
    sql = "SELECT event_id, msg_id, consumer, charged_at, order_id FROM charges ORDER BY charged_at"
    return [ChargeRow(str(e), str(m), str(c), float(t), str(o)) for e, m, c, t, o in read_rows(ledger, sql)]


def entries_by_event(entries: Iterable[tuple[str, dict[str, str]]]) -> dict[str, list[str]]:
    """``{event_id: [msg_id, ...]}`` of stream entries (a re-sent event has several)."""
    out: dict[str, list[str]] = {}
    for msg_id, fields in entries:
        out.setdefault(fields.get("event_id", ""), []).append(msg_id)
    return out


def drain_lines(path: Path, offset: int = 0) -> int:
    """Lines containing ``drain complete`` in a worker's output file, from byte ``offset`` on."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    return sum(1 for line in text.splitlines() if DRAIN.search(line))
