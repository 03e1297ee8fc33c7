"""labs.experiments.replication: WAIT under a cut link, and the tail a Sentinel failover loses."""

from __future__ import annotations

import contextlib

import pytest
import redis
from billing_support import wait_until

from labs.experiments.persistence import count_present, write_acknowledged
from labs.experiments.replication import (
    failover_tail_loss,
    linked_replicas,
    rejoin_old_master,
    replica_cut,
    wait_replicas,
)
from labs.launcher.topology import Topology

pytestmark = [pytest.mark.failover, pytest.mark.timeout(60)]


def test_wait_counts_no_replica_while_the_link_is_cut_and_one_after(sentinel_topology: Topology) -> None:
    master = redis.Redis.from_url(sentinel_topology.url, decode_responses=True)
    with contextlib.closing(master):
        with replica_cut(sentinel_topology) as replica:
            ids = write_acknowledged(master, "orders", 20)
            assert len(ids) == 20, "the master acknowledges with no replica linked"
            assert linked_replicas(master) == 0
            assert wait_replicas(master, 1, 100) == 0
            assert count_present(master, "orders", ids) == 20, "WAIT is not a rollback"
        wait_until(lambda: wait_replicas(master, 1, 200) == 1, 10, "WAIT to count the relinked replica")
        with contextlib.closing(replica.client()) as on_replica:
            assert count_present(on_replica, "orders", ids) == 20


@pytest.mark.slow
def test_failover_keeps_the_replicated_writes_and_loses_the_tail(sentinel_topology: Topology) -> None:
    result = failover_tail_loss(sentinel_topology, stream="orders", n_before=100, n_tail=40)
    assert (result.wait_before, result.wait_tail) == (1, 0)
    assert (result.before, result.before_survived) == (100, 100)
    assert (result.tail, result.tail_survived) == (40, 0)
    assert result.new_master != result.old_master
    assert sentinel_topology.master_addr() == result.new_master

    old = result.old_master
    rejoin = rejoin_old_master(sentinel_topology, old, stream="orders", tail_ids=result.tail_ids)
    assert rejoin.tail_after_restart == 40, "the old master reloads the tail from its own AOF"
    assert rejoin.tail_after_resync == 0, "and the resync with the new master discards it"
