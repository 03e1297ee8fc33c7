"""The business effect: a SQLite ledger of charges (WAL), shared by every worker process.

Schema (the contract labs and graders read):

- ``charges``: one row per applied charge (``event_id``, ``order_id``, ``amount``,
  ``msg_id``, ``consumer``, ``charged_at`` in unix seconds). It is never deduplicated by
  itself, so a duplicate charge stays visible and countable.
- ``applied_events(event_id PRIMARY KEY, ...)``: written only by the ``sqlite`` dedupe
  strategy, in the same transaction as the charge, so the effect happens exactly once. A new
  ledger's table holds the key alone, as lab 3's does: the message, the consumer and the time
  are in the charge with the same ``event_id``. Its rows used to copy them; the claim then cost
  2.7 us of CPU and 191 bytes of database a charge, now 2.0 us and 144 bytes (100,000 charges
  in batches of 100), and about a third less WAL. A ledger made with the copies keeps them.

``event_id`` holds the dedupe key: the message's ``event_id``, else ``<stream>:<msg_id>``.
``charges`` has no index on ``event_id``: the worker only appends to it, and an index on
random keys cost about 0.8 us per charge (a third of the write); the occasional count by
event (:meth:`Ledger.charge_counts`) scans instead. ``applied_events`` is a ``WITHOUT ROWID``
table: one B-tree keyed by ``event_id`` instead of a rowid table plus an index, which about
halves the cost of a claim. ``charges.id`` is a plain rowid (no ``AUTOINCREMENT``: that wrote
``sqlite_sequence`` in every commit, a page of WAL per charge at a lab's rate). Page size, WAL
bounds and the checkpoint after an outage are :mod:`solutions.checkpoints`' policy. Ledgers
created earlier keep their layouts and page size; both work.

``store_probe`` (one row, not part of the contract) takes :meth:`Ledger.probe`'s write while
the store is down. A failed write ends its transaction cleanly (after a full disk or an I/O
error SQLite has rolled it back already), and a failure of the store is raised as
:class:`~solutions.sqlite_errors.LedgerUnavailable`; after any fault but a lock the next call
opens a new connection (a filesystem mounted again can only be written through a new one).

This module owns the file, its connection, transactions and faults. A batch of charges is
:class:`~solutions.charges.Charges` (:mod:`solutions.charges`); what a write does inside its
transaction, the multi-row statements and the claim of ``applied_events``, is
:mod:`solutions.ledger_writes`'.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from solutions import checkpoints
from solutions.charges import Charge, Charges, batches_of
from solutions.ledger_writes import NotAllNew, claim_all, claim_each, insert_all
from solutions.sqlite_errors import Fault, LedgerUnavailable, describe_sqlite, fault_of

log = logging.getLogger(__name__)

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA", "Charge", "Charges", "Ledger", "batches_of", "read_rows"]

BUSY_TIMEOUT_MS = 30_000
PROBE_BUSY_TIMEOUT_MS = 1_000  # a probe waits at most this for another process's lock
T = TypeVar("T")
Args = TypeVarTuple("Args")

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    id         INTEGER PRIMARY KEY,
    event_id   TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    amount     TEXT    NOT NULL,
    msg_id     TEXT    NOT NULL,
    consumer   TEXT    NOT NULL,
    charged_at REAL    NOT NULL
);
CREATE TABLE IF NOT EXISTS applied_events (
    event_id   TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_probe (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at  REAL    NOT NULL
);
"""
PROBE = "INSERT OR REPLACE INTO store_probe(id, probed_at) VALUES (1, ?)"


def _probe_write(db: sqlite3.Connection, now: float) -> None:
    db.execute(PROBE, (now,))


def _wal_back(db: sqlite3.Connection) -> None:
    checkpoints.after_outage(db)


class Ledger:
    """A SQLite file in WAL mode; every write is one transaction for a whole batch."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = Path(path)
        self.busy_timeout_ms = busy_timeout_ms  # how long a write waits for another process's lock
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one writer at a time on our connection; close waits for it
        self._busy_ms = busy_timeout_ms
        self._opened = False  # once opened, a reconnect must find the file (see _connect)
        self._wide_claims = False  # an older ledger's applied_events copies msg_id, consumer and time
        self._wal_bound = 0  # bytes: see solutions.checkpoints
        self._commits = 0

    def open(self, *, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> Ledger:
        """Create the file and the tables and switch to WAL (idempotent).

        Several workers may open a new ledger at the same moment; switching to WAL needs a
        moment alone with the file, so "database is locked" is retried until ``timeout_s``.
        """
        self._db(timeout_s)
        return self

    def _db(self, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> sqlite3.Connection:
        """The connection, opened on first use (see :meth:`open`)."""
        deadline = time.monotonic() + timeout_s
        while self._conn is None:
            try:
                self._conn = self._connect()
            except sqlite3.OperationalError as exc:
                if fault_of(exc) is not Fault.LOCKED or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        """Open (the first time: create) the ledger. A reconnect never creates it: a ledger gone
        from its path (its filesystem unmounted for a repair, the file moved) is a store that is
        down, not an empty ledger to start over in the bare directory underneath."""
        busy_ms = self.busy_timeout_ms
        target: str | Path = self.path
        if self._opened:
            target = f"{self.path.absolute().as_uri()}?mode=rw"
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(target, timeout=busy_ms / 1000, check_same_thread=False, isolation_level=None,
                               uri=self._opened)
        try:
            conn.execute(f"PRAGMA busy_timeout={busy_ms}")
            checkpoints.apply_policy(conn)
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(applied_events)")}
        except BaseException:
            conn.close()
            raise
        self._opened = True
        self._wide_claims = "msg_id" in columns
        self._wal_bound = 0
        self._review_wal_bound(conn)
        return conn

    def close(self) -> None:
        """Wait for a write in progress, then close (the last connection to close checkpoints the rest)."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        """Close the connection (under the lock); the next call reopens."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):  # a broken connection still closes
                self._conn.close()
            self._conn = None
            self._busy_ms = self.busy_timeout_ms  # what the next connection starts with

    def write(self, charges: Iterable[Charge], *, once: bool, wait: bool = True) -> list[bool]:
        """:meth:`write_batches` for :class:`Charge` objects."""
        return self.write_batches(batches_of(charges), once=once, wait=wait)

    def write_batches(self, batches: Sequence[Charges], *, once: bool, wait: bool = True) -> list[bool]:
        """Write the charges in one transaction; return, per charge (in order), whether it was applied.

        With ``once`` each charge first claims its ``applied_events`` row; a charge whose
        event was already applied (earlier or in this same batch) is skipped (False). With
        ``wait=False`` it raises at once if another process holds the write lock, instead of
        waiting up to the busy timeout. A failure of the store raises
        :class:`~solutions.sqlite_errors.LedgerUnavailable` (``fault`` says which); nothing
        was written then.

        The statements are :mod:`solutions.ledger_writes`': multi-row ``INSERT ... VALUES``, one
        per :data:`~solutions.ledger_writes.ROWS_PER_STATEMENT` charges.
        """
        busy_ms = self.busy_timeout_ms if wait else 0  # 0: "database is locked" at once
        now = time.time()
        if not once:
            return self._transaction(busy_ms, insert_all, batches, now)
        try:
            return self._transaction(busy_ms, claim_all, batches, now, self._wide_claims)
        except NotAllNew:  # rolled back: decide event by event, in a transaction of its own
            return self._transaction(busy_ms, claim_each, batches, now, self._wide_claims)

    def probe(self) -> None:
        """Can the store take a write again? One committed row in ``store_probe`` (a lock is
        waited for :data:`PROBE_BUSY_TIMEOUT_MS` at most), then the WAL copied back and cut to
        zero (:func:`solutions.checkpoints.after_outage`: the probe runs only while the store is
        down, and an outage may have left a long WAL); raises ``LedgerUnavailable`` if either fails."""
        busy_ms = min(self.busy_timeout_ms, PROBE_BUSY_TIMEOUT_MS)
        self._transaction(busy_ms, _probe_write, time.time())
        self._transaction(busy_ms, _wal_back, begin=False)

    def _transaction(self, busy_ms: int, body: Callable[[sqlite3.Connection, *Args], T], *args: *Args,
                     begin: bool = True) -> T:
        """``BEGIN IMMEDIATE``, ``body(db, *args)``, ``COMMIT`` on our connection (opened if need
        be), under the lock (``begin=False``: ``body`` alone, outside a transaction, as a
        checkpoint must be). A failure of the store is raised as ``LedgerUnavailable``."""
        with self._lock:
            try:
                if self._conn is not None and self._conn.in_transaction:  # left so by a failure we did not see
                    log.warning("the ledger connection was left inside a transaction: opening a new one")
                    self._drop()
                db = self._db()
                self._busy(db, busy_ms)
                if not begin:
                    return body(db, *args)
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = body(db, *args)
                    db.execute("COMMIT")
                except BaseException:
                    self._end_failed(db)
                    raise
                self._commits += 1
                if self._commits >= checkpoints.REVIEW_EVERY_COMMITS:
                    self._review_wal_bound(db)
            except sqlite3.Error as exc:
                fault = fault_of(exc)
                if fault is None:
                    raise  # about the charges or our SQL, not the store: the caller's to judge
                reopen = fault is not Fault.LOCKED
                if reopen:
                    self._drop()
                raise LedgerUnavailable(fault, exc, reopened=reopen) from exc
        return result

    def _review_wal_bound(self, db: sqlite3.Connection) -> None:
        """The WAL's bound for the free space there is now (:func:`solutions.checkpoints.wal_bound_bytes`).
        Runs after a commit: it never raises (the charges are in)."""
        self._commits = 0
        bound = checkpoints.wal_bound_bytes(self.path.absolute().parent)
        if bound == self._wal_bound:
            return
        try:
            checkpoints.set_wal_bound(db, bound)
        except sqlite3.Error as exc:
            log.debug("could not set the WAL bound to %s bytes: %s", bound, describe_sqlite(exc))
            return
        log.debug("WAL bound: %s bytes", bound)
        self._wal_bound = bound

    def _end_failed(self, db: sqlite3.Connection) -> None:
        """Roll back, unless SQLite did already (a full disk, an I/O error): a second ROLLBACK
        fails and hides the cause. A connection that cannot leave its transaction is dropped."""
        if not db.in_transaction:
            return
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.debug("rollback failed (%s): the ledger opens a new connection", describe_sqlite(exc))
        if db.in_transaction:
            self._drop()

    def _busy(self, db: sqlite3.Connection, busy_ms: int) -> None:
        """``PRAGMA busy_timeout``, sent only when it changes."""
        if self._busy_ms != busy_ms:
            db.execute(f"PRAGMA busy_timeout={busy_ms}")
            self._busy_ms = busy_ms

    def charge_counts(self) -> dict[str, int]:
        """``event_id -> number of charges`` (a value above 1 is a duplicate charge)."""
        with self._lock:
            db = self._db()
            self._busy(db, self.busy_timeout_ms)
            rows = db.execute("SELECT event_id, COUNT(*) FROM charges GROUP BY event_id").fetchall()
        return {str(event_id): int(n) for event_id, n in rows}

    def total_charges(self) -> int:
        with self._lock:
            db = self._db()
            self._busy(db, self.busy_timeout_ms)
            (n,) = db.execute("SELECT COUNT(*) FROM charges").fetchone()
        return int(n)


def read_rows(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of a read-only query on a ledger file, from outside the worker (a lab, a check, a test).

    None while the file or its tables do not exist yet: the file appears a moment before the
    worker has created its tables, so "no such table" also means "no rows yet".
    """
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            return db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
