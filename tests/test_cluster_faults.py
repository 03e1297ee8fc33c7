"""labs.experiments.cluster_faults: a cluster failover loses the unreplicated tail; with
cluster-require-full-coverage yes one master's death stalls every shard, with no only its own."""

from __future__ import annotations

import asyncio

import pytest

from labs.experiments.cluster_faults import cluster_tail_loss, coverage_stall
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import readiness_problem

pytestmark = [pytest.mark.failover, pytest.mark.timeout(90)]


def test_cluster_failover_keeps_the_replicated_writes_and_loses_the_tail(healthy_cluster: ClusterTopology) -> None:
    result = cluster_tail_loss(healthy_cluster, stream="test:tail:{t}", n_before=100, n_tail=40)
    assert (result.wait_before, result.wait_tail) == (1, 0), "WAIT 1 says which writes no replica has"
    assert (result.before, result.before_survived) == (100, 100)
    assert (result.tail, result.tail_survived) == (40, 0), "acknowledged, then lost with the master"
    assert result.new_master != result.old_master
    assert readiness_problem(healthy_cluster.servers) == "", "the old master is back as a linked replica"


@pytest.mark.slow
def test_full_coverage_yes_stalls_the_other_shards_and_no_does_not(healthy_cluster: ClusterTopology) -> None:
    relaxed = asyncio.run(coverage_stall(healthy_cluster, stream="test:cov", full_coverage=False))
    strict = asyncio.run(coverage_stall(healthy_cluster, stream="test:cov", full_coverage=True))
    for run in (relaxed, strict):
        assert [s.killed for s in run.shards] == [True, False, False]
        assert len({s.master for s in run.shards}) == 3, "one shard per master"
        assert run.killed_gap_s > 1.0, "the dead master's shard waits for the promotion"
    # The mechanism, counted on the servers: with 'yes' the healthy masters refused writes.
    assert all(s.clusterdown_replies == 0 for s in relaxed.shards if not s.killed)
    assert all((s.clusterdown_replies or 0) > 0 for s in strict.shards if not s.killed)
    # And the time it cost them: the replica's election alone waits at least 500 ms (a loaded machine only
    # makes it longer). With 'no' the healthy shards' longest gap is the writers' own pauses, which a busy
    # machine stretches as much as it likes: no bound on it, the refusals counted above are the proof.
    gaps = f"others' longest gap: 'no' {relaxed.others_gap_s:.3f} s, 'yes' {strict.others_gap_s:.3f} s"
    assert strict.others_gap_s > 0.45, gaps
