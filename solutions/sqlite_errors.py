"""SQLite errors by kind: which failures are the business store's, not the message's.

SQLite says what went wrong in a result code (``sqlite3.Error.sqlite_errorcode``, Python
3.11+), not in the text, which differs between versions and hides the cause when a second
error follows the first (``cannot rollback - no transaction is active`` after SQLite had
already rolled back a transaction that failed for lack of space). :func:`fault_of` reads the
primary code (the low byte of an extended code such as ``SQLITE_IOERR_WRITE``):

==================  ==========================================  ===============================
fault               result codes                                what an operator sees
==================  ==========================================  ===============================
``locked``          BUSY, LOCKED, PROTOCOL                      another process holds the lock
``disk full``       FULL                                        the disk (or the quota) is full
``I/O error``       IOERR, NOLFS                                the disk fails, a file limit
``read-only``       READONLY                                    a read-only file or filesystem
``cannot open``     CANTOPEN                                    the file or directory is gone
``corrupt``         CORRUPT, NOTADB                             the file is damaged
``unavailable``     NOMEM, INTERRUPT, ABORT, SCHEMA             a failure of the moment
==================  ==========================================  ===============================

Every other code (a constraint, a type or an SQL error) is about what was written or about
our code, not about the store: :func:`fault_of` returns ``None`` for it.

A ledger that cannot write raises :class:`LedgerUnavailable`: the fault, the real cause, and
whether the connection was kept (only a lock leaves it as it was; after any other fault the
ledger opens a new one, see :mod:`solutions.ledger`).
"""

from __future__ import annotations

import enum
import sqlite3


class Fault(enum.Enum):
    """Why the business store cannot write, as an operator would say it."""

    LOCKED = "locked"
    DISK_FULL = "disk full"
    IO_ERROR = "I/O error"
    READ_ONLY = "read-only"
    CANNOT_OPEN = "cannot open"
    CORRUPT = "corrupt"
    UNAVAILABLE = "unavailable"


# Primary result codes (https://www.sqlite.org/rescode.html), by the fault they mean.
PRIMARY_CODES: dict[int, Fault] = {
    5: Fault.LOCKED,  # SQLITE_BUSY
    6: Fault.LOCKED,  # SQLITE_LOCKED
    15: Fault.LOCKED,  # SQLITE_PROTOCOL: a WAL lock race that lost too often
    13: Fault.DISK_FULL,  # SQLITE_FULL
    10: Fault.IO_ERROR,  # SQLITE_IOERR (and its extended codes: _WRITE, _FSYNC, _SHORT_READ ...)
    22: Fault.IO_ERROR,  # SQLITE_NOLFS
    8: Fault.READ_ONLY,  # SQLITE_READONLY (and _DBMOVED, _CANTINIT, _DIRECTORY ...)
    14: Fault.CANNOT_OPEN,  # SQLITE_CANTOPEN
    11: Fault.CORRUPT,  # SQLITE_CORRUPT
    26: Fault.CORRUPT,  # SQLITE_NOTADB
    7: Fault.UNAVAILABLE,  # SQLITE_NOMEM
    9: Fault.UNAVAILABLE,  # SQLITE_INTERRUPT
    4: Fault.UNAVAILABLE,  # SQLITE_ABORT
    17: Fault.UNAVAILABLE,  # SQLITE_SCHEMA
}


def fault_of(exc: BaseException) -> Fault | None:
    """The store's fault behind ``exc``, or None when it is not one (or not an SQLite error)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.Error) or code is None:
        return None
    return PRIMARY_CODES.get(code & 0xFF)


def describe_sqlite(exc: sqlite3.Error) -> str:
    """``database or disk is full (SQLITE_FULL)``: SQLite's text and the code's name."""
    name = getattr(exc, "sqlite_errorname", None)
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{text} ({name})" if name else text


class LedgerUnavailable(Exception):
    """The ledger could not write: the store's fault, not the charges'. Nothing was written.

    ``fault`` says which kind, ``cause`` is SQLite's own error (also ``__cause__``), and
    ``reopened`` whether the ledger dropped its connection so that the next call opens a new one.
    """

    def __init__(self, fault: Fault, cause: sqlite3.Error, *, reopened: bool) -> None:
        super().__init__(f"{fault.value}: {describe_sqlite(cause)}")
        self.fault = fault
        self.cause = cause
        self.reopened = reopened
