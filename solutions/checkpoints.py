"""The ledger's WAL policy: small pages, a WAL that stays bounded, and a checkpoint when the store is back.

In WAL mode SQLite appends every page a commit changes to the ``-wal`` file (one frame: the
page plus 24 bytes), and a checkpoint copies those pages back into the database file; the
WAL is then reused from its start. What one charge costs there is set by the page size and
by how many pages a commit touches: the ``charges`` leaf it appends to and the
``applied_events`` leaf its random key lands in (plus, with ``AUTOINCREMENT``, the
``sqlite_sequence`` page). The worker at a lab's rate commits one charge at a time, so with
SQLite's default 4 KiB pages and ``AUTOINCREMENT`` one charge cost about 12 KB of WAL, and
SQLite checkpoints only past 1000 pages (4 MB). On a nearly full disk that is fatal: the
space freed goes to the WAL within seconds, the checkpoint then needs room that the WAL holds,
and the store never comes back (issue 32). The policy, chosen for that case:

- **1 KiB pages** (:data:`PAGE_SIZE`, for a ledger created from now on; an older file keeps
  its page size): a frame is 1,048 bytes instead of 4,120, so a charge committed alone costs
  about 2 KB of WAL instead of 12 KB, and a batch of 100 about a fifth less. The B-trees are
  one level deeper, which costs some CPU per charge; the bench shows it.
- **no AUTOINCREMENT** on ``charges`` (see :mod:`solutions.ledger`): a rowid table already
  gives new rows increasing ids while nothing is deleted, and ``charges`` is append-only;
  ``AUTOINCREMENT`` only adds a write of ``sqlite_sequence`` to every commit.
- **a bounded WAL**: ``wal_autocheckpoint`` at an eighth of the free space of the ledger's
  filesystem, between :data:`MIN_WAL_BYTES` (512 KiB) and :data:`MAX_WAL_BYTES` (4 MiB), looked
  at again every :data:`REVIEW_EVERY_COMMITS` commits (:func:`wal_bound_bytes`): the commit that
  takes the WAL past it checkpoints (PASSIVE: it never waits for
  another process's readers or writers; one that cannot finish is simply tried again at the
  next commit). The WAL then never holds more than about that plus one batch, so a disk
  freed by well under 1 MB lets the ledger go on. It is inline (in the commit), not in a
  thread of its own: a thread's checkpoint does not keep up with a busy writer (new frames
  arrive while it copies, and SQLite restarts the WAL only once every frame is back), and
  a bound that holds only on a quiet machine is no bound on a full disk. (Tried again in
  issue 32's session: the checkpoint in a thread, with the next commit waiting for it, cost
  the worker more CPU than the waits it hid.)
  The bound is a price as well: with ``synchronous=NORMAL`` each checkpoint fsyncs the WAL
  and then the database (about 1 ms each on this machine's disk), and that wait stops the
  worker's event loop. At 256 KiB, turning them off (``synchronous=OFF``, which the ledger
  does not use) made the ``billing-worker`` process 12 % faster with ``--dedupe none`` and
  17 % with ``sqlite``; 512 KiB made half as many checkpoints (2 % and 5 % faster) and still
  fits in the 900 KB that ``tests/test_store_small_disk.py`` frees. So the bound follows the
  room there is: on a nearly full disk it is 512 KiB, as it was; with 32 MB free or more it is
  4 MiB, an eighth as many checkpoints (the ``billing-worker`` process, four fields, A/B
  twice: ``sqlite`` +6 % and +13 %, ``none`` +1 % and +2 %). A bound that the free space sets
  shrinks when the disk fills (within 64 commits), before the WAL could take what is left.
- **``journal_size_limit``** at the same bound (:data:`JOURNAL_SIZE_LIMIT_BYTES` on a nearly
  full disk): when
  the WAL restarts, a file that grew past the bound (one large batch, or checkpoints that
  could not run while the disk was full) is cut back to it; the space up to the bound stays
  the ledger's, so the next commits do not need the filesystem to find it again.
- **a TRUNCATE checkpoint when the store is back** (:func:`after_outage`, run by
  :meth:`~solutions.ledger.Ledger.probe` right after the probe's row commits): an outage may
  have left a long WAL (the checkpoints failed while the disk was full); copying it back at
  once and cutting the file to zero gives its space back before charging resumes. If that
  checkpoint fails on the store, the probe fails: the store is not back yet.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

PAGE_SIZE = 1024
MIN_WAL_BYTES = 512 * 1024  # the bound on a nearly full disk
MAX_WAL_BYTES = 4 * 1024 * 1024
FREE_SHARE = 8  # the WAL may take an eighth of the free space, between the two
REVIEW_EVERY_COMMITS = 64  # how often the free space is looked at again
WAL_AUTOCHECKPOINT_PAGES = MIN_WAL_BYTES // PAGE_SIZE  # a new ledger on a nearly full disk
JOURNAL_SIZE_LIMIT_BYTES = MIN_WAL_BYTES


def bound_for_free(free_bytes: int) -> int:
    """The WAL's bound in bytes for ``free_bytes`` free on the ledger's filesystem."""
    return max(MIN_WAL_BYTES, min(MAX_WAL_BYTES, free_bytes // FREE_SHARE))


def wal_bound_bytes(directory: Path) -> int:
    """:func:`bound_for_free` for the filesystem of ``directory`` (``statvfs``: the space an
    unprivileged process may use); the smallest bound if it cannot be asked."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return MIN_WAL_BYTES
    return bound_for_free(st.f_bavail * st.f_frsize)


def apply_policy(conn: sqlite3.Connection) -> None:
    """On a new connection, before the ledger's tables exist: page size (a new file only),
    then the WAL's smallest bounds (the caller switches to WAL, then sets the bound the free
    space allows with :func:`set_wal_bound`)."""
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a no-op on a database that exists already
    conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
    conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT_BYTES}")


def set_wal_bound(conn: sqlite3.Connection, bound_bytes: int) -> None:
    """``wal_autocheckpoint`` (in pages of this file's size) and ``journal_size_limit`` at ``bound_bytes``."""
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.execute(f"PRAGMA wal_autocheckpoint={max(1, bound_bytes // int(page_size))}")
    conn.execute(f"PRAGMA journal_size_limit={bound_bytes}")


def after_outage(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """``PRAGMA wal_checkpoint(TRUNCATE)``: every frame back into the database, the WAL cut to
    zero bytes. Returns SQLite's ``(busy, wal_pages, copied)``; a ``busy`` of 1 (another
    process reads or writes) is not a failure, the autocheckpoint finishes the job later.
    Raises ``sqlite3.Error`` when the store fails (a disk still full)."""
    busy, wal_pages, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    log.info("WAL checkpoint (TRUNCATE) after the outage: %s of %s pages copied (busy=%s)", copied, wal_pages, busy)
    return int(busy), int(wal_pages), int(copied)
