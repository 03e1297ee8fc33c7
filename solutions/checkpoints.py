"""WAL checkpoints off the write path: a thread of the ledger's own copies the WAL back.

In WAL mode SQLite appends every commit to the ``-wal`` file, and a checkpoint copies those
pages back into the database file. By default the checkpoint runs inside the COMMIT that
takes the WAL past 1000 pages, so one batch in a few dozen pays for copying all of them
(and for two fsyncs with ``synchronous=NORMAL``): a few milliseconds on the worker's event
loop, about a third of the average commit. The ledger turns that off for its writing
connection and asks a :class:`Checkpointer` instead, which runs
``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own, in a thread of its own.
PASSIVE never waits for a lock, so writers and readers carry on while it copies; SQLite
releases the GIL while it works, so the copy really runs beside the event loop.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger(__name__)

CHECKPOINT_ROWS = 5_000  # ask for a checkpoint after this many rows (a few MB of WAL)
CLOSE_TIMEOUT_S = 10.0


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on ``path`` in a daemon thread, when asked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = 0
        self._wake = threading.Event()
        self.finished = threading.Event()  # set after each checkpoint: see finish()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"wal-checkpoint:{path.name}", daemon=True)
        self._thread.start()

    def request(self) -> None:
        """Ask for a checkpoint soon (requests made while one runs are merged into the next)."""
        self._wake.set()

    def finish(self, conn: sqlite3.Connection) -> None:
        """On the writer's connection, right after a background checkpoint: copy the few pages
        written meanwhile, so that the WAL is complete and the next write starts it over.

        A background checkpoint never catches up with a busy writer by itself (new frames
        arrive while it copies), and SQLite reuses the WAL from its start only once every
        frame is back in the database; without this the ``-wal`` file would grow forever.
        """
        if not self.finished.is_set():
            return
        self.finished.clear()
        try:  # it runs after a COMMIT: a failure here must not look like a failed write
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint of %s after a commit failed: %r", self.path, exc)

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress, if any) and close its connection."""
        self._stopping = True
        self._wake.set()
        self._thread.join(CLOSE_TIMEOUT_S)

    def _run(self) -> None:
        conn = sqlite3.connect(self.path, timeout=CLOSE_TIMEOUT_S, isolation_level=None)
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            busy, wal_pages, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:  # the next request tries again
            log.warning("WAL checkpoint of %s failed: %r", self.path, exc)
            return
        self.checkpoints += 1
        self.finished.set()
        log.debug("WAL checkpoint of %s: %s of %s pages copied (busy=%s)", self.path, copied, wal_pages, busy)
