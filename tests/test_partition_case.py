"""labs.compare.partition_case: the same partition (leader + a producer cut off) on every broker.

The semantics asserted come from the independent record (the producers' logs against the
ledger), never from a speed: where the confirm waits for a majority (RabbitMQ, NATS, Redis with
WAIT 1) nothing confirmed is lost and the cut-off side confirms nothing; Redis without WAIT may
lose, and then only what the cut-off master confirmed alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from compare_support import require_brokers
from netns_support import skip_without_netns

from labs.compare import partition_case
from labs.compare.contract import Settings
from labs.compare.partition_case import PartitionPlan, PartitionRow
from labs.compare.producer import Attempt, ProduceLog

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SETTINGS = Settings(max_attempts=3, prefetch=8, redeliver_after_ms=500, publish_timeout_s=2.0)
# A shorter cut than make compare's, still longer than Sentinel's down-after (1 s) plus its vote and
# NATS's election (4-9 s); Redis's cut-off master stops taking writes at min-replicas-max-lag (10 s).
PLAN = PartitionPlan(rate_per_s=10.0, before_s=2.0, cut_s=14.0, after_s=2.0)


def _rows(kinds: tuple[str, ...], tmp: Path) -> dict[str, PartitionRow]:
    skip_without_netns()
    for kind in kinds:
        require_brokers(kind if kind in ("rabbitmq", "nats") else "redis")
    rows = partition_case.run_partition_rows(kinds, SETTINGS, tmp, PLAN)
    for row in rows:
        assert "error" not in row, row
    return {row["broker"]: row for row in rows}


def _shown(row: PartitionRow) -> str:
    keys = ("confirmed", "charged", "lost", "lost_ids", "lost_cut_off_side", "lost_earliest_confirm_s",
            "minority_confirmed_in_cut", "minority_accepting_s",
            "first_charge_after_cut_s", "cut_at_s", "heal_at_s")
    return ", ".join(f"{k}={row.get(k)}" for k in keys)


def _no_confirmed_write_lost(row: PartitionRow) -> None:
    assert row["lost"] == 0, f"{row['broker']} lost confirmed events: {_shown(row)}"
    assert row["charged"] >= row["confirmed"] and row["charged_twice"] == 0, _shown(row)
    assert row["minority_confirmed_in_cut"] == 0, (
        f"{row['broker']}: the cut-off side confirmed writes without a majority: {_shown(row)}")


@pytest.fixture(scope="module")
def redis_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PartitionRow]]:
    yield _rows(("redis", "redis+WAIT"), tmp_path_factory.mktemp("partition-redis"))


def test_redis_with_wait_loses_no_confirmed_event(redis_rows: dict[str, PartitionRow]) -> None:
    _no_confirmed_write_lost(redis_rows["redis+WAIT"])


def test_redis_without_wait_loses_only_what_the_cut_off_master_confirmed_alone(
        redis_rows: dict[str, PartitionRow]) -> None:
    row = redis_rows["redis"]
    assert row["lost"] == row["lost_cut_off_side"], f"a lost event from the majority's producer: {_shown(row)}"
    # the unreplicated tail at the cut is lost too: asynchronous replication lags by milliseconds on
    # loopback; the bound, 1 s before the cut, leaves room for a loaded machine
    earliest = row["lost_earliest_confirm_s"]
    assert earliest is None or earliest >= -1.0, (
        f"a lost event was confirmed {earliest} s from the cut, earlier than the replication tail: {_shown(row)}")
    accepting = row["minority_accepting_s"]
    # min-replicas-max-lag 10 s: the master refuses once no replica acked for 10 s; replicas ack every
    # second (repl-ping), and a loaded machine adds a little: bound 10 + 1 + 3 s.
    assert accepting is None or accepting <= 14.0, (
        f"the cut-off master took writes for {accepting} s, beyond min-replicas-max-lag 10 s + 4 s: {_shown(row)}")
    assert row["first_charge_after_cut_s"] is not None and row["first_charge_after_cut_s"] >= 1.0, (
        f"a majority write charged before Sentinel's down-after-milliseconds (1 s) passed: {_shown(row)}")


def test_nats_loses_no_confirmed_event_and_the_cut_off_leader_confirms_nothing(tmp_path: Path) -> None:
    row = _rows(("nats",), tmp_path)["nats"]
    _no_confirmed_write_lost(row)
    assert row["first_charge_after_cut_s"] is not None, _shown(row)


def test_rabbitmq_loses_no_confirmed_event_and_the_cut_off_leader_confirms_nothing(tmp_path: Path) -> None:
    row = _rows(("rabbitmq",), tmp_path)["rabbitmq"]
    _no_confirmed_write_lost(row)


# -- the figures, from the records alone (no broker) ---------------------------------------------


def _ledger(path: Path, charges: list[tuple[str, float]]) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE charges (id INTEGER PRIMARY KEY, event_id TEXT, charged_at REAL)")
        db.executemany("INSERT INTO charges (event_id, charged_at) VALUES (?, ?)", charges)
    return path


def test_figures_count_what_the_cut_off_side_confirmed_and_what_was_lost(tmp_path: Path) -> None:
    cut, heal = 100.0, 120.0
    minority = ProduceLog(attempts=[
        Attempt("m-1", 1, "confirmed", 99.5, 0.01),  # before the cut
        Attempt("m-2", 1, "confirmed", 100.2, 0.3),  # began before the cut: not the cut-off side's alone
        Attempt("m-3", 1, "confirmed", 105.0, 0.01),  # taken alone during the cut, then lost
        Attempt("m-4", 1, "unknown", 110.0, 2.0),
    ], confirmed={"m-1": 99.5, "m-2": 100.2, "m-3": 105.0})
    majority = ProduceLog(attempts=[Attempt("M-1", 1, "confirmed", 104.0, 3.5)], confirmed={"M-1": 104.0})
    ledger = _ledger(tmp_path / "l.sqlite3", [("m-1", 99.6), ("m-2", 100.3), ("M-1", 104.1)])
    row = partition_case._figures(ledger, minority, majority, 90.0, cut, heal)
    assert row["lost"] == 1 and row["lost_ids"] == ["m-3"] and row["lost_cut_off_side"] == 1
    assert row["lost_earliest_confirm_s"] == 5.0
    assert row["minority_confirmed_in_cut"] == 1 and row["minority_accepting_s"] == 5.0
    assert row["minority_unconfirmed_in_cut"] == 1
    assert row["first_charge_after_cut_s"] == pytest.approx(4.1)  # M-1 began at 100.5, after the cut
    assert row["cut_at_s"] == 10.0 and row["heal_at_s"] == 30.0
