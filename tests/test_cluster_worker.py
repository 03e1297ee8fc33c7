"""labs.experiments.cluster_worker on a real cluster: the sharded worker through a kill -9 of one shard's master
and through a live reshard (0 lost, 0 duplicated with sqlite, per-key order, XPENDING empty)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labs.experiments.cluster_worker import fault_under_load, reshard_under_load, steady_load
from labs.launcher.cluster import ClusterTopology

pytestmark = pytest.mark.timeout(120)


@pytest.mark.failover
@pytest.mark.slow
def test_kill_9_of_one_shards_master_loses_nothing_and_stalls_only_that_shard(
    healthy_cluster: ClusterTopology, tmp_path: Path
) -> None:
    marks: list[str] = []
    run = asyncio.run(fault_under_load(healthy_cluster, stream="cw:kill", ledger=tmp_path / "l.sqlite3",
                                       rate=200, before_s=1.0, after_s=1.0, mark=marks.append))
    assert marks == ["kill -9"] and run.old_master != run.new_master
    assert run.tally.confirmed > 200 and run.tally.lost == 0 and run.tally.duplicated == 0, run.tally
    assert run.tally.charged_once == run.tally.confirmed
    assert run.violations == 0 and run.pending_end == (0, 0, 0)
    assert run.gaps_s[0] >= 1.0, "the killed master's shard waited for the promotion"
    assert run.others_gap_s < 1.0, f"the other shards kept charging: {run.gaps_s}"


@pytest.mark.failover
def test_a_live_reshard_moves_the_stream_with_its_pel_and_the_worker_follows(
    healthy_cluster: ClusterTopology, tmp_path: Path
) -> None:
    run = asyncio.run(reshard_under_load(healthy_cluster, stream="cw:move", ledger=tmp_path / "l.sqlite3",
                                         rate=150, before_s=0.7, after_s=2.0))
    assert run.old_master != run.new_master
    stuck = {"consumer": "crashed", "deliveries": 1}
    assert run.detail["pel_before"] == run.detail["pel_after"] == stuck, "the PEL entry moved with the stream"
    assert run.tally.lost == 0 and run.tally.duplicated == 0 and run.violations == 0, run.tally
    assert run.pending_end == (0, 0, 0), "the crashed consumer's entry was rescued on the new master"


def test_per_key_order_holds_across_parallel_shards_and_the_global_order_does_not(
    cluster: ClusterTopology, tmp_path: Path
) -> None:
    run = asyncio.run(steady_load(cluster, stream="cw:order", ledger=tmp_path / "l.sqlite3", rate=400, seconds=1.5))
    assert run.tally.confirmed > 300 and run.tally.lost == 0 and run.tally.duplicated == 0
    assert run.violations == 0, "one order's events were charged in the order they were produced"
    assert run.detail["global_inversions"] > 0, "events of different orders were charged out of production order"
    assert all(n > 50 for n in run.detail["charged_per_shard"])
