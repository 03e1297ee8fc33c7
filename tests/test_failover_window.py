"""labs.experiments.failover_window: the old master's ~10 s after SENTINEL FAILOVER, per client."""

from __future__ import annotations

import asyncio

import pytest

from labs.experiments.failover_window import SENTINEL_RECONFIG_WAIT_S, graceful_window
from labs.launcher.topology import Topology

pytestmark = [pytest.mark.failover, pytest.mark.slow, pytest.mark.timeout(90)]


def test_a_plain_client_writes_to_the_old_master_until_sentinel_demotes_it(sentinel_topology: Topology) -> None:
    window = asyncio.run(graceful_window(sentinel_topology, prefix="window:"))
    assert window.new_master != window.old_master
    assert sentinel_topology.master_addr() == window.new_master
    assert window.reconfig_wait_s > SENTINEL_RECONFIG_WAIT_S - 0.5, window.by_sentinel  # Sentinel's own wait
    assert window.demoted_s >= window.events["+convert-to-slave"] - 0.5

    plain, watched = window.plain, window.watched
    # redis-py's master_for keeps its connection on the old master until Sentinel demotes it ...
    assert plain.window_s > window.switch_s + SENTINEL_RECONFIG_WAIT_S - 0.5, plain.lost_at[-3:]
    assert plain.lost > 0.5 * (plain.window_s - 1) * 1000 / window.interval_ms
    # ... the same client with FailoverWatch leaves it on +switch-master: nothing lost after that.
    assert max(watched.lost_at, default=0.0) < window.switch_s + 0.5, (window.switch_s, watched.lost_at)
    assert watched.lost < plain.lost / 3
    # Both kept writing: every tick either got an id or an error, and both reached the new master.
    assert len(plain.acknowledged) > plain.lost and len(watched.acknowledged) > watched.lost
