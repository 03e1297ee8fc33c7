"""What an ``event_id`` costs the ``sqlite`` strategy: random keys against time-ordered ones.

The ledger claims every event in ``applied_events``, a B-tree keyed by ``event_id``
(:mod:`solutions.ledger`). :func:`claim_cost` fills a fresh ledger to ``table_size`` claims,
then commits ``commits`` batches of ``per_commit`` more and counts what they wrote to the WAL
(frames: one page each, from ``PRAGMA wal_checkpoint`` with the autocheckpoint off) and the CPU
they took. :func:`compare` runs it with uuid4 hex ids and with
:func:`solutions.event_ids.new_event_id` (notebook 05, ``tests/test_event_ids.py``).
"""

from __future__ import annotations

import resource
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from solutions.event_ids import new_event_id
from solutions.ledger import Charges, Ledger

START_MS = 1_700_000_000_000
PER_MS = 50  # ids made per millisecond by the ordered generator: a busy producer


@dataclass(frozen=True)
class ClaimCost:
    """One kind of id: WAL frames and CPU per commit of ``per_commit`` claims on a full table."""

    kind: str
    table_size: int
    per_commit: int
    frames_per_commit: float
    cpu_us_per_charge: float


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def claim_cost(path: Path, kind: str, make_id: Callable[[int], str], *, table_size: int = 20_000,
               commits: int = 20, per_commit: int = 100) -> ClaimCost:
    """Fill ``applied_events`` to ``table_size`` with ``make_id(n)`` ids, then measure ``commits`` more commits."""
    ledger = Ledger(path).open()
    db = ledger._db()
    db.execute("PRAGMA wal_autocheckpoint=0")  # every frame stays in the WAL until counted
    n = 0

    def commit() -> None:
        nonlocal n
        charges = Charges("w1")
        for _ in range(per_commit):
            n += 1
            charges.add(make_id(n), "o-1", "10.00", f"{START_MS + n}-0")
        ledger.write_batches([charges], once=True)

    try:
        for _ in range(table_size // per_commit):
            commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        started = _cpu_s()
        for _ in range(commits):
            commit()
        cpu_s = _cpu_s() - started
        _, frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        ledger.close()
    return ClaimCost(kind, table_size, per_commit, int(frames) / commits, 1e6 * cpu_s / (commits * per_commit))


def compare(workdir: Path, *, table_size: int = 20_000, commits: int = 20) -> tuple[ClaimCost, ClaimCost]:
    """``(random, ordered)``: uuid4 hex ids, then time-ordered ones (``PER_MS`` a millisecond)."""
    random_ids = claim_cost(workdir / "random-ids.sqlite3", "uuid4 (random)", lambda _: uuid.uuid4().hex,
                            table_size=table_size, commits=commits)
    ordered = claim_cost(workdir / "ordered-ids.sqlite3", "new_event_id (time-ordered)",
                         lambda n: new_event_id(now_ms=START_MS + n // PER_MS), table_size=table_size, commits=commits)
    return random_ids, ordered
