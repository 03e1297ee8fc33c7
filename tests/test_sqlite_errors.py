"""SQLite errors by kind: real errors from a real SQLite file, classified by their result code."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from solutions.sqlite_errors import Fault, LedgerUnavailable, describe_sqlite, fault_of


def _error(action: Callable[[], object]) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as caught:
        action()
    return caught.value


def _db(path: Path, uri: str = "") -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}{uri}", uri=True, isolation_level=None, timeout=0)


def test_store_faults_are_told_apart_by_their_result_codes(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    with contextlib.closing(_db(path)) as db, contextlib.closing(_db(path)) as other:
        db.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
        db.execute("INSERT INTO t VALUES ('a')")
        other.execute("BEGIN IMMEDIATE")
        locked = _error(lambda: db.execute("BEGIN IMMEDIATE"))
        other.execute("ROLLBACK")
        constraint = _error(lambda: db.execute("INSERT INTO t VALUES ('a')"))
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count={pages}")
        full = _error(lambda: db.executemany("INSERT INTO t VALUES (?)", [(str(i) * 500,) for i in range(50)]))
        syntax = _error(lambda: db.execute("SELEC 1"))
    with contextlib.closing(_db(path, "?mode=ro")) as read_only:
        readonly = _error(lambda: read_only.execute("INSERT INTO t VALUES ('b')"))
    cannot_open = _error(lambda: _db(tmp_path / "no-such-dir" / "l.sqlite3", "?mode=rw"))
    closed = sqlite3.connect(path)
    closed.close()
    misuse = _error(lambda: closed.execute("SELECT 1"))

    assert (fault_of(locked), locked.sqlite_errorname) == (Fault.LOCKED, "SQLITE_BUSY")
    assert (fault_of(full), full.sqlite_errorname) == (Fault.DISK_FULL, "SQLITE_FULL")
    assert (fault_of(readonly), readonly.sqlite_errorname) == (Fault.READ_ONLY, "SQLITE_READONLY")
    assert fault_of(cannot_open) is Fault.CANNOT_OPEN
    # Not the store's: what was written, our SQL, our use of the connection, not SQLite at all.
    assert fault_of(constraint) is None and fault_of(syntax) is None
    assert fault_of(misuse) is None and fault_of(ValueError("locked")) is None
    assert describe_sqlite(full) == "database or disk is full (SQLITE_FULL)"


def test_an_extended_code_counts_by_its_primary_code() -> None:
    """``SQLITE_IOERR_WRITE`` is 778 = 10 | 3 << 8: an I/O error (tests/test_store_outage.py
    makes a real one with a file-size limit)."""
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = 778  # set as SQLite would (typeshed knows both attributes)
    error.sqlite_errorname = "SQLITE_IOERR_WRITE"
    assert fault_of(error) is Fault.IO_ERROR
    unavailable = LedgerUnavailable(Fault.IO_ERROR, error, reopened=True)
    assert str(unavailable) == "I/O error: disk I/O error (SQLITE_IOERR_WRITE)"
