"""solutions.event_ids: unique, time-ordered ids, and why the ledger wants them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from solutions.event_ids import new_event_id
from solutions.ledger import Charges, Ledger


def test_an_event_id_is_a_uuid7_in_32_hex_digits() -> None:
    event_id = new_event_id()
    assert len(event_id) == 32 and int(event_id, 16) >= 0
    parsed = uuid.UUID(hex=event_id)
    assert parsed.variant == uuid.RFC_4122 and parsed.version == 7


def test_ids_are_unique_and_ordered_by_their_millisecond() -> None:
    ids = [new_event_id(now_ms=1_700_000_000_000 + i // 100) for i in range(10_000)]
    assert len(set(ids)) == len(ids)
    by_ms = [event_id[:12] for event_id in ids]  # the first 48 bits are the millisecond
    assert by_ms == sorted(by_ms) and len(set(by_ms)) == 100
    assert new_event_id(now_ms=2) > new_event_id(now_ms=1)


def _wal_frames_per_commit(path: Path, make_id: Callable[[int], str]) -> float:
    """Claims of 100 events a commit into an ``applied_events`` of 20k: WAL frames per commit."""
    ledger = Ledger(path).open()
    db = ledger._db()
    db.execute("PRAGMA wal_autocheckpoint=0")  # every frame stays in the WAL until counted
    n = 0

    def commit() -> None:
        nonlocal n
        charges = Charges("w1")
        for _ in range(100):
            n += 1
            charges.add(make_id(n), "o-1", "10.00", f"{n}-0")
        ledger.write_batches([charges], once=True)

    for _ in range(200):
        commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(20):
        commit()
    _, frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    ledger.close()
    return int(frames) / 20


def test_random_ids_dirty_a_leaf_per_claim_and_time_ordered_ones_do_not(tmp_path: Path) -> None:
    random_frames = _wal_frames_per_commit(tmp_path / "random.sqlite3", lambda _: uuid.uuid4().hex)
    ordered_frames = _wal_frames_per_commit(tmp_path / "ordered.sqlite3",
                                            lambda n: new_event_id(now_ms=1_700_000_000_000 + n // 50))
    # Random: a leaf of applied_events for each of the 100 claims, and most of the pages above
    # them (about 210 frames here). Ordered: the last leaves of both tables and the pages above
    # (about 25: mostly the charges rows, which every strategy writes).
    assert random_frames > 100
    assert ordered_frames < 40
    assert random_frames > 5 * ordered_frames
