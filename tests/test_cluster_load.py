"""labs.experiments.cluster_load: the ledger checks (per-key order, global inversions, gaps per shard, tally)."""

from __future__ import annotations

from labs.experiments.cluster_load import (
    Charged,
    Sent,
    global_inversions,
    key_order_violations,
    longest_gaps,
    seq_of,
    tally,
)
from solutions.shards import shard_of


def charged(event_id: str, order_id: str, t: float = 0.0) -> Charged:
    return Charged(event_id, order_id, "1-0", t)


def test_key_order_counts_an_event_charged_after_a_later_one_of_its_order() -> None:
    rows = [charged("ev-1", "a"), charged("ev-3", "a"), charged("ev-2", "a"), charged("ev-0", "b")]
    assert seq_of("ev-12") == 12 and seq_of("w-2-7") == 7
    assert key_order_violations(rows) == 1  # ev-2 after ev-3 of order a; b's ev-0 is its first
    assert global_inversions(rows) == 2  # 3 -> 2 and 2 -> 0: no global order, though b is in order


def test_longest_gap_per_shard_counts_the_window_ends() -> None:
    a = next(f"o{i}" for i in range(100) if shard_of(f"o{i}", 2) == 0)
    b = next(f"o{i}" for i in range(100) if shard_of(f"o{i}", 2) == 1)
    rows = [charged("e-0", a, 1.0), charged("e-1", b, 1.1), charged("e-2", a, 1.2), charged("e-3", a, 3.0)]
    gaps = longest_gaps(rows, 2, since=1.0, until=4.0)
    assert [round(g, 3) for g in gaps] == [1.8, 2.9]  # shard 1 charged once, at 1.1, then nothing until 4.0


def test_tally_counts_lost_and_duplicated_against_the_writers_record() -> None:
    sent = [Sent(f"e-{i}", "o", 0, f"{i}-0", 0.0) for i in range(4)]
    rows = [charged("e-0", "o"), charged("e-1", "o"), charged("e-1", "o")]
    result = tally(sent, rows, dead_lettered=["e-3"])
    assert (result.confirmed, result.charged_once, result.lost, result.duplicated) == (4, 1, 1, 1)
    assert result.lost_ids == ("e-2",)
