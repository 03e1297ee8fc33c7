"""The business effect: a SQLite ledger of charges (WAL), shared by every worker process.

Schema (the contract labs and graders read):

- ``charges``: one row per applied charge (``event_id``, ``order_id``, ``amount``,
  ``msg_id``, ``consumer``, ``charged_at`` in unix seconds). It is never deduplicated by
  itself, so a duplicate charge stays visible and countable.
- ``applied_events(event_id PRIMARY KEY, ...)``: written only by the ``sqlite`` dedupe
  strategy, in the same transaction as the charge, so the effect happens exactly once.

``event_id`` holds the dedupe key: the message's ``event_id``, else ``<stream>:<msg_id>``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BUSY_TIMEOUT_MS = 30_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id   TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    amount     TEXT    NOT NULL,
    msg_id     TEXT    NOT NULL,
    consumer   TEXT    NOT NULL,
    charged_at REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_event_id ON charges(event_id);
CREATE TABLE IF NOT EXISTS applied_events (
    event_id   TEXT PRIMARY KEY,
    msg_id     TEXT NOT NULL,
    consumer   TEXT NOT NULL,
    applied_at REAL NOT NULL
);
"""


INSERT_CHARGE = (
    "INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) VALUES (?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True)
class Charge:
    """One charge to write."""

    event_id: str
    order_id: str
    amount: str
    msg_id: str
    consumer: str


def _charge_row(charge: Charge) -> tuple[str, str, str, str, str]:
    return (charge.event_id, charge.order_id, charge.amount, charge.msg_id, charge.consumer)


class Ledger:
    """A SQLite file in WAL mode; every write is one transaction for a whole batch."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def open(self, *, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> Ledger:
        """Create the file and the tables and switch to WAL (idempotent).

        Several workers may open a new ledger at the same moment; switching to WAL needs a
        moment alone with the file, so "database is locked" is retried until ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while self._conn is None:
            try:
                self._conn = self._connect()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return self

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _db(self) -> sqlite3.Connection:
        return self.open()._conn  # type: ignore[return-value]

    def write(self, charges: Sequence[Charge], *, once: bool, wait: bool = True) -> list[bool]:
        """Write the charges in one transaction; return, per charge, whether it was applied.

        With ``once`` each charge first claims its ``applied_events`` row; a charge whose
        event was already applied (earlier or in this same batch) is skipped (False). With
        ``wait=False`` it raises ``sqlite3.OperationalError`` at once if another process holds
        the write lock, instead of waiting up to the busy timeout.
        """
        now = time.time()
        applied: list[bool] = []
        with self._lock:
            db = self._db()
            if not wait:  # fail at once with "database is locked" instead of waiting for it
                db.execute("PRAGMA busy_timeout=0")
            try:
                db.execute("BEGIN IMMEDIATE")
            finally:
                if not wait:
                    db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            try:
                if once:
                    applied = [self._write_one(db, charge, now, once=True) for charge in charges]
                else:  # nothing to check per row: one executemany
                    db.executemany(INSERT_CHARGE, [(*_charge_row(c), now) for c in charges])
                    applied = [True] * len(charges)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return applied

    @staticmethod
    def _write_one(db: sqlite3.Connection, charge: Charge, now: float, *, once: bool) -> bool:
        if once:
            cursor = db.execute(
                "INSERT OR IGNORE INTO applied_events(event_id, msg_id, consumer, applied_at) VALUES (?, ?, ?, ?)",
                (charge.event_id, charge.msg_id, charge.consumer, now),
            )
            if cursor.rowcount != 1:
                return False
        db.execute(
            "INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) VALUES (?, ?, ?, ?, ?, ?)",
            (charge.event_id, charge.order_id, charge.amount, charge.msg_id, charge.consumer, now),
        )
        return True

    def charge_counts(self) -> dict[str, int]:
        """``event_id -> number of charges`` (a value above 1 is a duplicate charge)."""
        with self._lock:
            rows = self._db().execute("SELECT event_id, COUNT(*) FROM charges GROUP BY event_id").fetchall()
        return {str(event_id): int(n) for event_id, n in rows}

    def total_charges(self) -> int:
        with self._lock:
            (n,) = self._db().execute("SELECT COUNT(*) FROM charges").fetchone()
        return int(n)
