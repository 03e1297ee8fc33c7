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
- **a bounded WAL**: ``wal_autocheckpoint`` at :data:`WAL_AUTOCHECKPOINT_PAGES` (512 KiB of
  WAL): the commit that takes the WAL past it checkpoints (PASSIVE: it never waits for
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
  17 % with ``sqlite``; 512 KiB makes half as many checkpoints (2 % and 5 % faster) and still
  fits in the 900 KB that ``tests/test_store_small_disk.py`` frees.
- **``journal_size_limit``** at the same 512 KiB (:data:`JOURNAL_SIZE_LIMIT_BYTES`): when
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
import sqlite3

log = logging.getLogger(__name__)

PAGE_SIZE = 1024
WAL_AUTOCHECKPOINT_PAGES = 512  # about 512 KiB of WAL with 1 KiB pages
JOURNAL_SIZE_LIMIT_BYTES = 512 * 1024


def apply_policy(conn: sqlite3.Connection) -> None:
    """On a new connection, before the ledger's tables exist: page size (a new file only),
    then the WAL's bounds (the caller switches to WAL)."""
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a no-op on a database that exists already
    conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
    conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT_BYTES}")


def after_outage(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """``PRAGMA wal_checkpoint(TRUNCATE)``: every frame back into the database, the WAL cut to
    zero bytes. Returns SQLite's ``(busy, wal_pages, copied)``; a ``busy`` of 1 (another
    process reads or writes) is not a failure, the autocheckpoint finishes the job later.
    Raises ``sqlite3.Error`` when the store fails (a disk still full)."""
    busy, wal_pages, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    log.info("WAL checkpoint (TRUNCATE) after the outage: %s of %s pages copied (busy=%s)", copied, wal_pages, busy)
    return int(busy), int(wal_pages), int(copied)
