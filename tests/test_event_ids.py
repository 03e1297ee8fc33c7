"""solutions.event_ids: unique, time-ordered ids (why the ledger wants them: tests/test_ledger_keys.py)."""

from __future__ import annotations

import uuid

from solutions.event_ids import new_event_id


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
