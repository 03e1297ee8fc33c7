"""The ledger on its own: a SQLite file in WAL mode, one transaction per batch of charges.

How the strategies use it against real Redis is in tests/test_idempotency.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from solutions.charges import Charge, Charges
from solutions.ledger import Ledger
from solutions.sqlite_errors import Fault, LedgerUnavailable


def test_ledger_write_applies_each_event_once_across_and_within_batches(tmp_path: Path) -> None:
    """``once``: a repeat inside a batch (even across its 100-row statements) or of an earlier batch is skipped."""

    def charge(event_id: str, msg_id: str) -> Charge:
        return Charge(event_id, "o-1", "1.00", msg_id, "c")

    ledger = Ledger(tmp_path / "l.sqlite3").open()
    try:
        assert ledger.write([charge("e-0", "0-1")], once=True) == [True]
        batch = [charge(f"e-{i}", f"1-{i}") for i in range(150)] + [charge("e-149", "1-150"), charge("e-5", "1-151")]
        applied = ledger.write(batch, once=True, wait=False)
        assert applied == [False] + [True] * 149 + [False, False]
        assert ledger.write([charge("e-0", "2-0"), charge("e-0", "2-1")], once=False) == [True, True]
        counts = ledger.charge_counts()
        assert len(counts) == 150 and counts["e-0"] == 3 and counts["e-5"] == counts["e-149"] == 1
        assert ledger.total_charges() == 152
    finally:
        ledger.close()


def test_a_batch_of_new_events_claims_them_from_its_own_charges(tmp_path: Path) -> None:
    """``once``, the usual batch: each claim is made from the charge just inserted (``INSERT OR
    IGNORE ... SELECT``), so ``applied_events`` holds exactly the batch's events (the key alone:
    the message, consumer and time are the charge's); rows charged earlier are not claimed again."""
    ledger = Ledger(tmp_path / "l.sqlite3").open()
    try:
        assert ledger.write(_hundred(0), once=False) == [True] * 100  # charges no claim was made for
        assert ledger.write(_hundred(100), once=True) == [True] * 100
        with sqlite3.connect(ledger.path) as db:
            columns = [row[1] for row in db.execute("PRAGMA table_info(applied_events)")]
            claims = {row[0] for row in db.execute("SELECT event_id FROM applied_events")}
            charged = {row[0] for row in db.execute("SELECT event_id FROM charges WHERE id > 100")}
        db.close()
        assert columns == ["event_id"]
        assert claims == charged == {f"e-{i}" for i in range(100, 200)}
    finally:
        ledger.close()


@pytest.mark.parametrize("rowid", [True, False], ids=["rowid table", "without rowid"])
def test_a_ledger_whose_claims_copy_the_charge_keeps_copying_it(tmp_path: Path, rowid: bool) -> None:
    """A ledger made when ``applied_events`` copied the charge's message, consumer and time (as
    a rowid table, or the WITHOUT ROWID table after it) keeps that layout, and both ways of
    claiming (a batch of new events, and one decided event by event) fill every column."""
    path = tmp_path / "wide.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE applied_events (event_id TEXT PRIMARY KEY, msg_id TEXT NOT NULL, "
            "consumer TEXT NOT NULL, applied_at REAL NOT NULL)" + ("" if rowid else " WITHOUT ROWID")
        )
    db.close()
    ledger = Ledger(path).open()
    try:
        assert ledger.write(_hundred(0), once=True) == [True] * 100
        again = [Charge("e-5", "o-1", "1.00", "2-5", "d"), Charge("e-500", "o-1", "1.00", "2-500", "d")]
        assert ledger.write(again, once=True) == [False, True]
    finally:
        ledger.close()
    with sqlite3.connect(path) as db:
        claims = db.execute("SELECT event_id, msg_id, consumer, applied_at FROM applied_events").fetchall()
        charges = db.execute("SELECT event_id, msg_id, consumer, charged_at FROM charges").fetchall()
    db.close()
    assert sorted(claims) == sorted(charges) and len(claims) == 101


def test_a_batch_with_an_event_applied_before_is_decided_event_by_event(tmp_path: Path) -> None:
    """``once``: a batch first inserts its charges and claims all its events from them (one
    ``INSERT OR IGNORE ... SELECT``); when one was applied before, both are undone and each
    event looked up, so nothing is half-claimed or charged twice.
    Rows of different consumers in one batch keep their own consumer."""
    ledger = Ledger(tmp_path / "l.sqlite3").open()
    try:
        assert ledger.write([Charge("e-1", "o-1", "1.00", "0-1", "a")], once=True) == [True]
        batch = [Charge("e-0", "o-1", "2.00", "1-0", "b"), Charge("e-1", "o-1", "1.00", "1-1", "b"),
                 Charge("e-2", "o-2", "3.00", "1-2", "c")]
        assert ledger.write(batch, once=True) == [True, False, True]
        with sqlite3.connect(ledger.path) as db:
            claims = db.execute(CLAIMS_WITH_THEIR_CHARGE).fetchall()
            rows = db.execute("SELECT event_id, amount, msg_id, consumer FROM charges ORDER BY id").fetchall()
        db.close()
        assert claims == [("e-0", "1-0", "b"), ("e-1", "0-1", "a"), ("e-2", "1-2", "c")]
        assert rows == [("e-1", "1.00", "0-1", "a"), ("e-0", "2.00", "1-0", "b"), ("e-2", "3.00", "1-2", "c")]
    finally:
        ledger.close()


def test_batches_of_several_runs_are_one_transaction_with_verdicts_in_order(tmp_path: Path) -> None:
    """``write_batches``: the runs' flat batches (each its consumer) in one transaction; the
    verdicts come back in the order of the charges, a repeat in a later batch and an event
    applied before both skipped; the claim binds the same flat rows as the insert."""
    ledger = Ledger(tmp_path / "l.sqlite3").open()
    try:
        assert ledger.write_batches([Charges("a", ["e-1", "o-1", "1.00", "0-1"])], once=True) == [True]
        first = Charges("b", ["e-0", "o-1", "2.00", "1-0", "e-1", "o-1", "1.00", "1-1"])
        second = Charges("c", ["e-2", "o-2", "3.00", "1-2", "e-0", "o-1", "2.00", "1-3"])
        assert ledger.write_batches([first, second], once=True) == [True, False, True, False]
        assert ledger.write_batches([Charges("d", [])], once=True) == [] == ledger.write([], once=True)
        with sqlite3.connect(ledger.path) as db:
            claims = db.execute(CLAIMS_WITH_THEIR_CHARGE).fetchall()
            rows = db.execute("SELECT event_id, order_id, amount, msg_id, consumer FROM charges ORDER BY id").fetchall()
        db.close()
        assert claims == [("e-0", "1-0", "b"), ("e-1", "0-1", "a"), ("e-2", "1-2", "c")]
        assert rows == [("e-1", "o-1", "1.00", "0-1", "a"), ("e-0", "o-1", "2.00", "1-0", "b"),
                        ("e-2", "o-2", "3.00", "1-2", "c")]
    finally:
        ledger.close()


def test_a_ledger_created_with_the_older_applied_events_layout_still_applies_once(tmp_path: Path) -> None:
    """New ledgers make ``applied_events`` a WITHOUT ROWID table; one made before (a rowid
    table with a primary-key index) keeps working with the same verdicts."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE applied_events (event_id TEXT PRIMARY KEY, msg_id TEXT NOT NULL, "
            "consumer TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        db.execute("INSERT INTO applied_events VALUES ('e-1', '0-1', 'old', 0)")
    db.close()
    ledger = Ledger(path).open()
    try:
        batch = [Charge(f"e-{i}", "o-1", "1.00", f"1-{i}", "c") for i in range(3)]
        batch.append(Charge("e-2", "o-1", "1.00", "1-9", "c"))
        assert ledger.write(batch, once=True) == [True, False, True, False]
        assert ledger.charge_counts() == {"e-0": 1, "e-2": 1}
    finally:
        ledger.close()
    with sqlite3.connect(path) as db:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'applied_events'").fetchone()
    db.close()
    assert "WITHOUT ROWID" not in sql


CLAIMS_WITH_THEIR_CHARGE = (
    "SELECT event_id, msg_id, consumer FROM applied_events JOIN charges USING (event_id) ORDER BY event_id"
)


def _hundred(start: int) -> list[Charge]:
    return [Charge(f"e-{start + i}", "o-1", "1.00", f"1-{start + i}", "c") for i in range(100)]


def _wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_one_charge_alone_costs_about_three_kilobytes_of_wal(tmp_path: Path) -> None:
    """The policy's point (solutions.checkpoints): 1 KiB pages, no sqlite_sequence write: a
    charge committed alone (a lab's rate) appends about three 1,048-byte frames (the two leaves
    it lands in, a parent now and then), where 4 KiB pages and AUTOINCREMENT took 12-15 KB."""
    from solutions.checkpoints import PAGE_SIZE

    path = tmp_path / "l.sqlite3"
    ledger = Ledger(path).open()
    try:
        before = _wal_bytes(path)
        for i in range(50):
            ledger.write([Charge(f"e-{i}", "o-1", "1.00", f"1-{i}", "c")], once=True)
        per_charge = (_wal_bytes(path) - before) / 50
        with sqlite3.connect(path) as db:
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
            sequence = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone()[0]
        db.close()
    finally:
        ledger.close()
    assert (page_size, sequence) == (PAGE_SIZE, 0)
    assert 2 * (PAGE_SIZE + 24) <= per_charge <= 4 * (PAGE_SIZE + 24), f"{per_charge:.0f} bytes of WAL per charge"


def test_the_wal_stays_bounded_under_a_steady_stream_of_commits(tmp_path: Path) -> None:
    """The commit past wal_autocheckpoint checkpoints and the WAL is reused from its start, so
    it never holds much more than the bound (what the free space allows) plus one batch."""
    from solutions.checkpoints import PAGE_SIZE, wal_bound_bytes

    path = tmp_path / "l.sqlite3"
    ledger = Ledger(path).open()
    peak = 0
    try:
        for start in range(0, 60_000, 100):
            ledger.write(_hundred(start), once=True)
            peak = max(peak, _wal_bytes(path))
        assert ledger.total_charges() == 60_000
        with sqlite3.connect(path) as db:
            limit = db.execute("PRAGMA journal_size_limit").fetchone()[0]  # per connection: ours is not
        db.close()
    finally:
        ledger.close()
    bound_bytes = wal_bound_bytes(tmp_path)
    bound = bound_bytes // PAGE_SIZE * (PAGE_SIZE + 24)  # frames of a page and a 24-byte header
    assert peak <= bound + 200 * (PAGE_SIZE + 24), f"the WAL reached {peak} bytes"  # bound + one batch's pages
    assert peak > bound_bytes // 2, f"the WAL never came near its bound of {bound_bytes} bytes"
    assert limit == -1  # a connection of someone else's keeps SQLite's default
    assert not Path(f"{path}-wal").exists()  # the last connection to close checkpointed the rest


@pytest.mark.parametrize(
    ("free_bytes", "bound_bytes"),
    [(0, 512 * 1024), (900_000, 512 * 1024), (8 * 1024 * 1024, 1024 * 1024), (10**12, 4 * 1024 * 1024)],
)
def test_the_wal_bound_is_an_eighth_of_the_free_space_between_512_kib_and_4_mib(
    free_bytes: int, bound_bytes: int
) -> None:
    """A nearly full disk keeps the 512 KiB that tests/test_store_small_disk.py frees room for;
    a roomy one gets fewer checkpoints (each fsyncs twice)."""
    from solutions.checkpoints import bound_for_free

    assert bound_for_free(free_bytes) == bound_bytes


def test_a_probe_that_commits_copies_the_wal_back_and_cuts_it_to_zero(tmp_path: Path) -> None:
    """After an outage the probe's TRUNCATE checkpoint gives back the WAL's space at once."""
    from solutions.checkpoints import JOURNAL_SIZE_LIMIT_BYTES

    path = tmp_path / "l.sqlite3"
    ledger = Ledger(path).open()
    reader = sqlite3.connect(path)
    try:
        reader.execute("BEGIN")  # a reader's snapshot holds the WAL: autocheckpoints cannot finish
        reader.execute("SELECT count(*) FROM charges").fetchone()
        for start in range(0, 6_000, 100):
            ledger.write(_hundred(start), once=True)
        reader.rollback()
        assert _wal_bytes(path) > JOURNAL_SIZE_LIMIT_BYTES  # long: no checkpoint could finish
        ledger.probe()
        assert _wal_bytes(path) == 0
        assert ledger.total_charges() == 6_000
    finally:
        reader.close()
        ledger.close()


# -- when the store fails: the real cause, a clean end, a new connection ---------------------------


def _batch(start: int, n: int = 20) -> list[Charge]:
    return [Charge(f"e-{i}", "o-1", "1.00", f"1-{i}", "c") for i in range(start, start + n)]


def test_a_full_store_raises_its_real_cause_and_the_next_write_gets_a_new_connection(tmp_path: Path) -> None:
    """SQLite rolls a transaction back by itself when the disk is full; the ledger must not
    answer that with a ROLLBACK of its own ("cannot rollback - no transaction is active", the
    text that hid the cause). ``max_page_count`` makes a real SQLITE_FULL on this connection."""
    ledger = Ledger(tmp_path / "l.sqlite3").open()
    try:
        ledger.write(_batch(0), once=True)
        db = ledger._db()
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count={pages}")
        with pytest.raises(LedgerUnavailable) as caught:
            ledger.write(_batch(100, 500), once=True)
        assert caught.value.fault is Fault.DISK_FULL and caught.value.reopened
        assert "database or disk is full (SQLITE_FULL)" in str(caught.value)
        assert "rollback" not in str(caught.value) and caught.value.__cause__ is caught.value.cause
        with pytest.raises(sqlite3.ProgrammingError):  # the old connection is closed ...
            db.execute("SELECT 1")
        assert ledger.total_charges() == 20  # nothing of the failed batch
        assert ledger._db() is not db  # ... and a new one opened (with the default page limit)
        assert ledger.write(_batch(100, 500), once=True) == [True] * 500
    finally:
        ledger.close()


def test_a_lock_held_past_the_busy_timeout_keeps_the_connection_and_the_probe_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    ledger = Ledger(path, busy_timeout_ms=100).open()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        db = ledger._db()
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(LedgerUnavailable) as caught:
            ledger.write(_batch(0), once=True, wait=False)
        assert caught.value.fault is Fault.LOCKED and not caught.value.reopened
        assert "database is locked (SQLITE_BUSY)" in str(caught.value)
        with pytest.raises(LedgerUnavailable):
            ledger.probe()  # waits up to the busy timeout, then says locked
        other.execute("COMMIT")
        ledger.probe()
        assert ledger._db() is db
        (probed_at,) = other.execute("SELECT probed_at FROM store_probe").fetchone()
        assert probed_at > 0
    finally:
        other.close()
        ledger.close()


def test_a_connection_left_inside_a_transaction_is_replaced(tmp_path: Path) -> None:
    """A connection that a failure left inside a transaction would refuse every write after it
    ("cannot start a transaction within a transaction") and hold the lock against every other
    worker: the ledger replaces it before the next write."""
    ledger = Ledger(tmp_path / "l.sqlite3").open()
    try:
        stale = ledger._db()
        stale.execute("BEGIN IMMEDIATE")
        assert ledger.write(_batch(0), once=True) == [True] * 20
        assert ledger._db() is not stale and ledger.total_charges() == 20
    finally:
        ledger.close()


def test_a_ledger_gone_from_its_path_is_a_store_that_is_down_not_a_new_empty_ledger(tmp_path: Path) -> None:
    """Its filesystem unmounted for a repair, the file moved away: a reconnect must not create
    a fresh ledger in the bare directory (the charges would go where nobody counts them, and
    ``applied_events`` would start empty). It fails until the ledger is back."""
    path = tmp_path / "l.sqlite3"
    ledger = Ledger(path).open()
    try:
        ledger.write(_batch(0), once=True)
        ledger.close()  # as after a fault: the next call reconnects
        moved = tmp_path / "elsewhere.sqlite3"
        path.rename(moved)
        with pytest.raises(LedgerUnavailable) as caught:
            ledger.probe()
        assert caught.value.fault is Fault.CANNOT_OPEN and not path.exists()
        moved.rename(path)
        ledger.probe()
        assert ledger.write(_batch(0), once=True) == [False] * 20  # the same ledger: already applied
    finally:
        ledger.close()
