"""labs.experiments.cluster_worker on a real cluster: the sharded worker through a kill -9 of one shard's master
and through a live reshard (0 lost, 0 duplicated with sqlite, per-key order, XPENDING empty)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from billing_support import until

from labs.experiments.cluster_worker import (
    fault_under_load,
    reshard_under_load,
    startup_nodes,
    steady_load,
    worker_settings,
)
from labs.launcher.cluster import ClusterTopology
from solutions.cluster_site import ClusterSite
from solutions.worker import Worker

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
    gaps = f"longest pause in charging per shard {run.gaps_s} s, CLUSTERDOWN replies {run.clusterdown_replies}"
    assert run.gaps_s[0] >= 1.0, f"the killed master's shard waited for the promotion: {gaps}"
    # Only that shard stalled: with cluster-require-full-coverage no the healthy masters refused nothing (counted
    # in their INFO errorstats). Their charging gaps are not the proof: a loaded machine pauses this whole
    # process (all shards alike; 1.44 s on both healthy shards once, under make test-noisy).
    assert len(run.clusterdown_replies) == 3 and run.clusterdown_replies[0] is None, gaps
    assert run.others_refused == 0, gaps


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
    run = asyncio.run(steady_load(cluster, stream="cw:order", ledger=tmp_path / "l.sqlite3", rate=400, seconds=1.5,
                                  min_sent=350))
    assert run.tally.confirmed > 300 and run.tally.lost == 0 and run.tally.duplicated == 0
    assert run.violations == 0, "one order's events were charged in the order they were produced"
    assert run.detail["global_inversions"] > 0, "events of different orders were charged out of production order"
    assert all(n > 50 for n in run.detail["charged_per_shard"])


@pytest.mark.failover
def test_a_stop_while_one_shard_has_no_live_copy_drains_in_seconds(healthy_cluster: ClusterTopology,
                                                                     tmp_path: Path) -> None:
    """SIGSTOP one shard's master and its replica (a stall: sockets stay open, nothing answers,
    and no failover can help), then stop the worker. The drain asks each shard what is left
    pending and gives each rescuer lease up, all shards at once and each within a bound. Before,
    the leases were given up shard after shard with no bound, and the one on the stalled shard
    waited out the client's retries (35 s here)."""

    async def scenario() -> float:
        settings = worker_settings(startup_nodes(healthy_cluster), "cw:stall", 3, tmp_path / "l.sqlite3",
                                   drain_timeout_s=2.0)
        site = ClusterSite(settings)
        worker = Worker(settings, site=site)
        task = asyncio.create_task(worker.run())
        await until(lambda: task.done() or (len(worker.parts) == 3 and all(p.rescuer.holding for p in worker.parts)),
                    15, "every shard's rescuer holding its lease")
        assert site.router is not None and not task.done()
        owner = site.router.owner(worker.parts[0].name)
        assert owner is not None
        nodes = healthy_cluster.nodes()
        master = next(node for node in nodes if node.port == owner[1])
        ports = {master.port} | {node.port for node in nodes if node.master_id == master.node_id}
        pids = [pid for proc in healthy_cluster.servers if proc.port in ports and (pid := proc.pid()) is not None]
        assert len(pids) == 2, f"the shard's master and its replica: {ports}"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            worker.request_stop()
            await asyncio.wait_for(task, 90)
            return time.monotonic() - started
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

    drain_s = asyncio.run(scenario())
    print(f"drain with a shard stalled: {drain_s:.2f}s")
    assert drain_s < 10.0, f"the drain took {drain_s:.1f}s with one shard stalled"
