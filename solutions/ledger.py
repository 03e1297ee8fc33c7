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
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from solutions import checkpoints
from solutions.sqlite_errors import Fault, LedgerUnavailable, describe_sqlite, fault_of

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
PROBE_BUSY_TIMEOUT_MS = 1_000  # a probe waits at most this for another process's lock
T = TypeVar("T")

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


INSERT_CHARGES = "INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) VALUES "
CLAIM_EVENTS = "INSERT INTO applied_events(event_id) VALUES "
CLAIM_INSERTED = "INSERT OR IGNORE INTO applied_events(event_id) SELECT event_id FROM charges WHERE id > ?"
# A ledger made before applied_events lost its copies of the charge's msg_id, consumer and time.
WIDE_CLAIM_EVENTS = "INSERT INTO applied_events(event_id, msg_id, consumer, applied_at) VALUES "
WIDE_CLAIM_INSERTED = (
    "INSERT OR IGNORE INTO applied_events(event_id, msg_id, consumer, applied_at) "
    "SELECT event_id, msg_id, consumer, charged_at FROM charges WHERE id > ?"
)
APPLIED_AMONG = "SELECT event_id FROM applied_events WHERE event_id IN "
WIDTH = 4  # the values of a charge in :attr:`Charges.rows`: event_id, order_id, amount, msg_id
ROWS_PER_STATEMENT = 100  # 400 parameters at most, well under SQLite's limit


def _values(rows: int, width: int, shared: str) -> str:
    """``(?3, ?4, ..., ?1, ?2), (...)``: ``width`` parameters of each row's own, then the
    ``shared`` ones (``?1`` ...) that every row repeats: bound once per statement, not per row."""
    return ", ".join(
        "(" + ", ".join(f"?{3 + row * width + i}" for i in range(width)) + shared + ")" for row in range(rows)
    )


@functools.lru_cache(maxsize=64)
def _insert_sql(rows: int) -> str:
    return INSERT_CHARGES + _values(rows, WIDTH, ", ?1, ?2")  # consumer, charged_at


@functools.lru_cache(maxsize=64)
def _claim_sql(rows: int) -> str:
    return CLAIM_EVENTS + ", ".join(["(?)"] * rows)


@functools.lru_cache(maxsize=64)
def _wide_claim_sql(rows: int) -> str:
    return WIDE_CLAIM_EVENTS + _values(rows, 2, ", ?1, ?2")  # event_id, msg_id; consumer, applied_at


@functools.lru_cache(maxsize=64)
def _applied_sql(keys: int) -> str:
    return APPLIED_AMONG + "(" + ", ".join(["?"] * keys) + ")"


def _execute_rows(
    db: sqlite3.Connection, sql_for: Callable[[int], str], shared: Sequence[str | float],
    params: Sequence[str | float], width: int,
) -> list[Any]:
    """The rows that :func:`_statements` returned."""
    return [row for cursor in _statements(db, sql_for, shared, params, width) for row in cursor]


def _statements(
    db: sqlite3.Connection, sql_for: Callable[[int], str], shared: Sequence[str | float],
    params: Sequence[str | float], width: int,
) -> Iterator[sqlite3.Cursor]:
    """Run ``sql_for(rows)`` over flat ``params`` (``width`` per row), at most
    :data:`ROWS_PER_STATEMENT` rows a statement, each statement with the ``shared`` parameters
    first (``?1``, ``?2``); each statement's cursor."""
    step = ROWS_PER_STATEMENT * width
    for start in range(0, len(params), step):
        part = params[start : start + step]
        yield db.execute(sql_for(len(part) // width), [*shared, *part])


def _insert_charges(db: sqlite3.Connection, consumer: str, rows: Sequence[str], now: float) -> int | None:
    """Charges (:data:`WIDTH` values each) into ``charges``; the rowid of the first, None if
    there were none (a rowid table hands out max(rowid) + 1, row by row)."""
    first: int | None = None
    for cursor in _statements(db, _insert_sql, (consumer, now), rows, WIDTH):
        if first is None:
            first = (cursor.lastrowid or 0) - cursor.rowcount + 1
    return first


class _NotAllNew(Exception):
    """A batch with an event applied before, or twice: the transaction is rolled back."""


def _probe_write(db: sqlite3.Connection, now: float) -> None:
    db.execute(PROBE, (now,))


def _wal_back(db: sqlite3.Connection) -> None:
    checkpoints.after_outage(db)


@dataclass(slots=True)
class Charge:
    """One charge to write, the readable way (tests, tools); the worker writes :class:`Charges`."""

    event_id: str
    order_id: str
    amount: str
    msg_id: str
    consumer: str


@dataclass(slots=True)
class Charges:
    """A batch of one consumer's charges, flat, as the ledger binds them: :data:`WIDTH` values
    per charge (``event_id, order_id, amount, msg_id``) in one list.

    This is how a run's charges travel from the handler to the ledger: an object per charge
    (a :class:`Charge`) cost about 1 us a message, a fifth of the worker's own time with
    ``--dedupe none``; a tuple added to a list costs a tenth of that.
    """

    consumer: str
    rows: list[str] = field(default_factory=list)

    def add(self, event_id: str, order_id: str, amount: str, msg_id: str) -> None:
        self.rows += (event_id, order_id, amount, msg_id)

    def __len__(self) -> int:
        return len(self.rows) // WIDTH

    def __iter__(self) -> Iterator[Charge]:
        rows, consumer = self.rows, self.consumer
        for i in range(0, len(rows), WIDTH):
            yield Charge(rows[i], rows[i + 1], rows[i + 2], rows[i + 3], consumer)

    @property
    def event_ids(self) -> list[str]:
        return self.rows[0::WIDTH]

    @property
    def claims(self) -> list[str]:
        """``event_id, msg_id`` of each charge, flat: the ``applied_events`` rows (made in C)."""
        return list(itertools.chain.from_iterable(zip(self.rows[0::WIDTH], self.rows[3::WIDTH], strict=True)))

    def only(self, keep: Sequence[bool]) -> Charges:
        """The charges whose ``keep`` is True, in order."""
        rows = self.rows
        kept: list[str] = []
        for n, ok in enumerate(keep):
            if ok:
                kept += rows[n * WIDTH : (n + 1) * WIDTH]
        return Charges(self.consumer, kept)


def batches_of(charges: Iterable[Charge]) -> list[Charges]:
    """:class:`Charge` objects as batches, one per stretch of the same consumer, in order."""
    batches: list[Charges] = []
    for c in charges:
        if not batches or batches[-1].consumer != c.consumer:
            batches.append(Charges(c.consumer))
        batches[-1].add(c.event_id, c.order_id, c.amount, c.msg_id)
    return batches


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

        Rows go in as multi-row ``INSERT ... VALUES (...), (...)`` statements, one per
        :data:`ROWS_PER_STATEMENT` charges: one statement step instead of one per row.
        """
        busy_ms = self.busy_timeout_ms if wait else 0  # 0: "database is locked" at once
        now = time.time()
        if not once:
            return self._transaction(busy_ms, self._insert, batches, now)
        try:
            return self._transaction(busy_ms, self._claim_all, batches, now)
        except _NotAllNew:  # rolled back: decide event by event, in a transaction of its own
            return self._transaction(busy_ms, self._claim_each, batches, now)

    @staticmethod
    def _insert(db: sqlite3.Connection, batches: Sequence[Charges], now: float) -> list[bool]:
        """``once`` off: every charge inserted."""
        for batch in batches:
            _insert_charges(db, batch.consumer, batch.rows, now)
        return [True] * sum(map(len, batches))

    def _claim_each(self, db: sqlite3.Connection, batches: Sequence[Charges], now: float) -> list[bool]:
        """``once``, when some event of the batch was applied before or comes twice: the new ones
        claimed (:meth:`_claim`) and only their charges inserted."""
        applied = self._claim(db, batches, now)
        start = 0
        for batch in batches:
            end = start + len(batch)
            mine = applied[start:end]
            rows = batch.rows if all(mine) else batch.only(mine).rows
            _insert_charges(db, batch.consumer, rows, now)
            start = end
        return applied

    def probe(self) -> None:
        """Can the store take a write again? One committed row in ``store_probe`` (a lock is
        waited for :data:`PROBE_BUSY_TIMEOUT_MS` at most), then the WAL copied back and cut to
        zero (:func:`solutions.checkpoints.after_outage`: the probe runs only while the store is
        down, and an outage may have left a long WAL); raises ``LedgerUnavailable`` if either fails."""
        busy_ms = min(self.busy_timeout_ms, PROBE_BUSY_TIMEOUT_MS)
        self._transaction(busy_ms, _probe_write, time.time())
        self._transaction(busy_ms, _wal_back, begin=False)

    def _transaction(self, busy_ms: int, body: Callable[..., T], *args: object, begin: bool = True) -> T:
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

    def _claim_all(self, db: sqlite3.Connection, batches: Sequence[Charges], now: float) -> list[bool]:
        """The usual batch: no event applied before and none twice. Its charges are inserted and
        their ``applied_events`` rows claimed from them (``INSERT OR IGNORE ... SELECT`` over the
        rowids just given out, nothing bound twice); the count of claimed rows says whether every
        event was new. If one was not, :class:`_NotAllNew` rolls the transaction back, and
        :meth:`_claim_each` decides in another (a redelivery: rare, and then no savepoint to
        pay for in every batch)."""
        keys = batches[0].event_ids if len(batches) == 1 else [key for batch in batches for key in batch.event_ids]
        if not keys:
            return []
        if len(set(keys)) != len(keys):
            raise _NotAllNew
        first_id: int | None = None
        for batch in batches:
            first = _insert_charges(db, batch.consumer, batch.rows, now)
            first_id = first if first_id is None else first_id
        before = db.total_changes
        db.execute(WIDE_CLAIM_INSERTED if self._wide_claims else CLAIM_INSERTED, ((first_id or 1) - 1,))
        if db.total_changes - before != len(keys):
            raise _NotAllNew
        return [True] * len(keys)

    def _claim(self, db: sqlite3.Connection, batches: Sequence[Charges], now: float) -> list[bool]:
        """Which charges are new, when some event was applied before or comes twice in the batch
        (:meth:`_claim_all` said so); their ``applied_events`` rows are written. Inside ``BEGIN
        IMMEDIATE`` no other writer can come between the lookup and the claim."""
        keys = batches[0].event_ids if len(batches) == 1 else [key for batch in batches for key in batch.event_ids]
        applied = {row[0] for row in _execute_rows(db, _applied_sql, (), keys, 1)}
        verdicts: list[bool] = []
        for key in keys:  # a repeat within the batch: only its first occurrence is new
            first = key not in applied
            applied.add(key)
            verdicts.append(first)
        if not self._wide_claims:
            _execute_rows(db, _claim_sql, (), [key for key, new in zip(keys, verdicts, strict=True) if new], 1)
            return verdicts
        start = 0
        for batch in batches:
            end = start + len(batch)
            new = batch.only(verdicts[start:end])
            _execute_rows(db, _wide_claim_sql, (batch.consumer, now), new.claims, 2)
            start = end
        return verdicts

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
