"""labs.experiments.cluster_scaling on a real cluster: throughput is measured per number of shards, and a change
from 3 to 4 shards lets an order's second event overtake its first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labs.experiments.cluster_scaling import moved_share, resplit, throughput
from labs.launcher.cluster import ClusterTopology

pytestmark = pytest.mark.timeout(90)


def test_throughput_is_measured_per_number_of_shards(cluster: ClusterTopology, tmp_path: Path) -> None:
    points = asyncio.run(throughput(cluster, stream="cw:tp", ledger_dir=tmp_path, shard_counts=(1, 3),
                                    per_shard=150))
    assert [(p.shards, p.events) for p in points] == [(1, 150), (3, 450)]
    assert all(p.rate > 0 for p in points), points
    # the loop thread's share on a CPU or queued for one: one thread, so at most the wall time (ns rounding)
    assert all(p.loop_busy is None or 0 < p.loop_busy <= 1.01 for p in points), points


def test_a_new_shard_count_sends_an_orders_next_event_ahead_of_its_first(
    cluster: ClusterTopology, tmp_path: Path
) -> None:
    run = asyncio.run(resplit(cluster, stream="cw:resplit", ledger=tmp_path / "l.sqlite3", backlog=300))
    assert run.old_shard != run.new_shard
    assert run.charged == ("x-2", "x-1") and run.violations == 1  # event 2 overtook event 1
    assert 0.7 <= run.moved_share <= 0.8  # about 3/4 of the orders change shard from 3 to 4
    assert run.moved_share == moved_share(3)
