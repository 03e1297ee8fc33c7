"""labs.experiments.ledger_keys: what an event_id costs applied_events, random against time-ordered."""

from __future__ import annotations

from pathlib import Path

from labs.experiments.ledger_keys import compare


def test_random_ids_dirty_a_leaf_per_claim_and_time_ordered_ones_do_not(tmp_path: Path) -> None:
    random_ids, ordered = compare(tmp_path)
    # Random: a leaf of applied_events for each of the 100 claims, and most of the pages above
    # them (about 210 frames here). Ordered: the last leaves of both tables and the pages above
    # (about 25: mostly the charges rows, which every strategy writes).
    assert random_ids.frames_per_commit > 100
    assert ordered.frames_per_commit < 40
    assert random_ids.frames_per_commit > 5 * ordered.frames_per_commit
