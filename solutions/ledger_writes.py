"""What one write of the ledger does inside its transaction: the charges in, and with ``once`` their claims.

:class:`~solutions.ledger.Ledger` owns the connection, the transaction and the faults of the
store; it runs one of these bodies between ``BEGIN IMMEDIATE`` and ``COMMIT``:

- :func:`insert_all` (``once`` off): every charge inserted;
- :func:`claim_all` (``once``, the usual batch): the charges inserted and their
  ``applied_events`` rows claimed from them (``INSERT OR IGNORE ... SELECT`` over the rowids
  just given out, nothing bound twice); if one event was applied before or comes twice,
  :class:`NotAllNew` rolls the transaction back;
- :func:`claim_each` (``once``, after :class:`NotAllNew`, in a transaction of its own): the new
  events looked up and claimed, and only their charges inserted.

Rows go in as multi-row ``INSERT ... VALUES (...), (...)`` statements, one per
:data:`ROWS_PER_STATEMENT` charges (one statement step instead of one per row), and what the
rows share (the consumer, the time) is bound once per statement. ``wide`` is a ledger made
before ``applied_events`` held the key alone: its rows copy the charge's msg_id, consumer and time.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator, Sequence

from solutions.charges import WIDTH, Charges

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
) -> list[tuple[str, ...]]:
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


class NotAllNew(Exception):
    """A batch with an event applied before, or twice: the transaction is rolled back."""


def insert_all(db: sqlite3.Connection, batches: Sequence[Charges], now: float) -> list[bool]:
    """``once`` off: every charge inserted."""
    for batch in batches:
        _insert_charges(db, batch.consumer, batch.rows, now)
    return [True] * sum(map(len, batches))


def claim_all(db: sqlite3.Connection, batches: Sequence[Charges], now: float, wide: bool) -> list[bool]:
    """The usual batch: no event applied before and none twice. Its charges are inserted and
    their ``applied_events`` rows claimed from them; the count of claimed rows says whether every
    event was new. If one was not, :class:`NotAllNew` rolls the transaction back, and
    :func:`claim_each` decides in another (a redelivery: rare, and then no savepoint to pay for
    in every batch)."""
    keys = batches[0].event_ids if len(batches) == 1 else [key for batch in batches for key in batch.event_ids]
    if not keys:
        return []
    if len(set(keys)) != len(keys):
        raise NotAllNew
    first_id: int | None = None
    for batch in batches:
        first = _insert_charges(db, batch.consumer, batch.rows, now)
        first_id = first if first_id is None else first_id
    before = db.total_changes
    db.execute(WIDE_CLAIM_INSERTED if wide else CLAIM_INSERTED, ((first_id or 1) - 1,))
    if db.total_changes - before != len(keys):
        raise NotAllNew
    return [True] * len(keys)


def claim_each(db: sqlite3.Connection, batches: Sequence[Charges], now: float, wide: bool) -> list[bool]:
    """``once``, when some event of the batch was applied before or comes twice: the new ones
    claimed (:func:`_claim`) and only their charges inserted."""
    applied = _claim(db, batches, now, wide)
    start = 0
    for batch in batches:
        end = start + len(batch)
        mine = applied[start:end]
        rows = batch.rows if all(mine) else batch.only(mine).rows
        _insert_charges(db, batch.consumer, rows, now)
        start = end
    return applied


def _claim(db: sqlite3.Connection, batches: Sequence[Charges], now: float, wide: bool) -> list[bool]:
    """Which charges are new, when some event was applied before or comes twice in the batch
    (:func:`claim_all` said so); their ``applied_events`` rows are written. Inside ``BEGIN
    IMMEDIATE`` no other writer can come between the lookup and the claim."""
    keys = batches[0].event_ids if len(batches) == 1 else [key for batch in batches for key in batch.event_ids]
    applied = {row[0] for row in _execute_rows(db, _applied_sql, (), keys, 1)}
    verdicts: list[bool] = []
    for key in keys:  # a repeat within the batch: only its first occurrence is new
        first = key not in applied
        applied.add(key)
        verdicts.append(first)
    if not wide:
        _execute_rows(db, _claim_sql, (), [key for key, new in zip(keys, verdicts, strict=True) if new], 1)
        return verdicts
    start = 0
    for batch in batches:
        end = start + len(batch)
        new = batch.only(verdicts[start:end])
        _execute_rows(db, _wide_claim_sql, (batch.consumer, now), new.claims, 2)
        start = end
    return verdicts
