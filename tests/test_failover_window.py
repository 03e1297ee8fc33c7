"""labs.experiments.failover_window: the old master's ~10 s after SENTINEL FAILOVER, per client."""

from __future__ import annotations

import asyncio

import pytest

from labs.experiments.failover_window import SENTINEL_RECONFIG_WAIT_S, graceful_window
from labs.launcher.topology import Topology

pytestmark = [pytest.mark.failover, pytest.mark.slow, pytest.mark.timeout(90)]


def test_a_plain_client_writes_to_the_old_master_until_sentinel_demotes_it(sentinel_topology: Topology) -> None:
    window = asyncio.run(graceful_window(sentinel_topology, prefix="window:"))
    why = window.explain()  # every figure below, each sentinel's events logged and seen, TILT, the timers
    assert window.new_master != window.old_master, why
    assert sentinel_topology.master_addr() == window.new_master, why
    # Sentinel's own wait, on its own clock (sentinel.c: > 4 x 2 s claiming master, counted from an INFO
    # reply after its +switch-master): no margin, a loaded machine only makes it longer.
    assert window.reconfig_wait_s > SENTINEL_RECONFIG_WAIT_S, f"wait {window.reconfig_wait_s:.3f} s\n{why}"
    # the demotion is polled every 20 ms by a client of the same loop: seen after the conversion
    assert window.demoted_s >= window.converted_s - 0.05, why

    plain, watched = window.plain, window.watched
    # redis-py's master_for keeps its connection on the old master until Sentinel demotes it: its last lost
    # write came within two of its longest pauses (a busy loop stretches them) before the conversion.
    slack_s = 2 * plain.longest_pause_s(window.switch_s)
    assert plain.window_s > window.converted_s - slack_s, f"slack {slack_s:.3f} s\n{why}"
    # about one write per tick until then (half, for the pauses of a loaded machine)
    assert plain.lost > 0.5 * (plain.window_s - 1) * 1000 / window.interval_ms, why
    # ... the same client with FailoverWatch leaves it on +switch-master (the watch and the listener that saw
    # the switch share one event loop, so a busy loop delays both alike): nothing lost 0.5 s after that.
    assert max(watched.lost_at, default=0.0) < window.switch_s + 0.5, why
    assert watched.lost < plain.lost / 3, why
    # Both kept writing: every tick either got an id or an error, and both reached the new master.
    assert len(plain.acknowledged) > plain.lost and len(watched.acknowledged) > watched.lost, why
