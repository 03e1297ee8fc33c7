"""labs.experiments.alert_faults (and monitored_queue): real faults fire their alerts.

Read only through Prometheus's HTTP API, on the lab copy of the rules (times / 60). The stack
(the session's sentinel and aof topologies, exporters, Prometheus) is shared with test_monitoring,
test_key_incidents and notebook 10. The harmless events that must fire nothing (a planned failover,
a quiet stream with an idle consumer: :func:`watch_quiet`) are asserted by notebook 10 under nbval
(section 5) on this same stack, and by the promtool quiet cases in ``monitoring/tests``; running
the 12-second window twice would only double the suite's time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from monitoring_support import MonitoredStack

from labs.experiments.alert_faults import MemoryFiller, counted_memory, memory_limit, wait_fired
from labs.experiments.monitored_queue import MonitoredQueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
PREFIX = "faults-test:"


@pytest.fixture
def queue(monitored_stack: MonitoredStack, tmp_path: Path) -> Iterator[MonitoredQueue]:
    q = MonitoredQueue.start(monitored_stack.mon, monitored_stack.sentinel, tmp_path, prefix=PREFIX, rate=20)
    try:
        yield q
    finally:
        q.close()


@pytest.mark.failover
def test_stopped_workers_and_filling_memory_fire_their_alerts_memory_before_oom(
    monitored_stack: MonitoredStack, queue: MonitoredQueue
) -> None:
    api = monitored_stack.mon.api
    aof_url = monitored_stack.aof.url
    node = monitored_stack.node(monitored_stack.aof)
    with contextlib.closing(redis.Redis.from_url(aof_url)) as client, memory_limit(client, 0.75) as maxmemory:
        assert 0.7 < counted_memory(client) / maxmemory < 0.8
        filler = MemoryFiller(aof_url, f"{PREFIX}filler", bytes_per_s=0.25 * maxmemory / 15)
        fault_at = queue.stop_workers()
        filler.start()
        try:
            fired = wait_fired(
                api,
                {
                    "StreamGroupFallingBehind": {"stream": queue.stream},
                    "StreamNoLiveConsumer": {"stream": queue.stream},
                    "BillingWorkerDown": {"stream": queue.stream},
                    "RedisMemoryHigh": {"node": node},
                    # In the lab copy the first OOM ever keeps this alert firing for 8 s only (5 min in
                    # production): it is watched from the start, in the same wait, not after the others.
                    "RedisRejectingWrites": {"node": node},
                },
                fault_at=fault_at,
                timeout_s=60,
            )
            filler.join(45)
        finally:
            filler.stop_event.set()
            client.delete(f"{PREFIX}filler")
    assert filler.first_oom_at is not None, "the producer never met OOM"
    assert "maxmemory" in filler.first_oom_error
    assert fired["RedisMemoryHigh"].fired_at < filler.first_oom_at
    assert fired["RedisRejectingWrites"].fired_at >= filler.first_oom_at - 2.0  # evaluated after the error
    assert all(f.delay_s > 0 for f in fired.values())
    assert fired["BillingWorkerDown"].labels["severity"] == "warning"
    assert fired["StreamGroupFallingBehind"].labels["severity"] == "critical"


def test_a_stalled_redis_is_down_within_seconds(monitored_stack: MonitoredStack) -> None:
    """A Redis that stops answering (SIGSTOP) without dying: the exporter times out, RedisDown fires."""
    pid = monitored_stack.aof.servers[0].pid()
    assert pid is not None
    fault_at = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        fired = wait_fired(monitored_stack.mon.api, {"RedisDown": {"node": monitored_stack.node(monitored_stack.aof)}},
                           fault_at=fault_at, timeout_s=30)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert fired["RedisDown"].delay_s < 30
    assert monitored_stack.aof.servers[0].ping()
