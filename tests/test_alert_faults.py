"""labs.experiments.alert_faults (and monitored_queue): real faults fire their alerts, harmless events fire none.

Read only through Prometheus's HTTP API, on the lab copy of the rules (times / 60). The stack
(a sentinel and an aof topology, exporters, Prometheus) is shared with test_key_incidents.
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

from labs.experiments.alert_faults import (
    MemoryFiller,
    about_streams,
    counted_memory,
    memory_limit,
    wait_fired,
    watch_quiet,
)
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


def _value(stack: MonitoredStack, expr: str) -> float | None:
    result = stack.mon.api.query(expr)
    return float(result[0]["value"][1]) if result else None


@pytest.mark.failover
def test_a_planned_failover_and_a_quiet_stream_raise_no_alarm(
    monitored_stack: MonitoredStack, queue: MonitoredQueue
) -> None:
    api = monitored_stack.mon.api
    result = monitored_stack.sentinel.failover(hard=False)
    window = watch_quiet(api, 12.0, relevant=about_streams(PREFIX))
    assert window.loud == [], [(a.name, a.labels) for a in window.loud]
    assert "RedisFailoverHappened" in {a.name for a in window.info}
    # The situations did arise: the role changed, and the quiet stream's consumer sat idle past
    # the threshold (2 s in the lab copy) with nothing to read.
    assert monitored_stack.sentinel.master_addr() == result.new_master
    quiet = f'stream="{queue.quiet_stream}"'
    assert (_value(monitored_stack, f"stream_group:consumer_idle_min_seconds{{{quiet}}}") or 0) > 2
    assert _value(monitored_stack, f"stream_group:lag_entries{{{quiet}}}") == 0
    queue.wait_consuming()  # the workers followed the new master


@pytest.mark.failover
def test_stopped_workers_and_filling_memory_fire_their_alerts_memory_before_oom(
    monitored_stack: MonitoredStack, queue: MonitoredQueue
) -> None:
    api = monitored_stack.mon.api
    aof_url = monitored_stack.aof.url
    node = monitored_stack.node(monitored_stack.aof)
    with contextlib.closing(redis.Redis.from_url(aof_url)) as client, memory_limit(client, 0.75) as maxmemory:
        assert 0.7 < counted_memory(client) / maxmemory < 0.8
        filler = MemoryFiller(aof_url, f"{PREFIX}filler", bytes_per_s=0.25 * maxmemory / 12)
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
                },
                fault_at=fault_at,
                timeout_s=45,
            )
            filler.join(45)
            fired |= wait_fired(api, {"RedisRejectingWrites": {"node": node}}, fault_at=fault_at, timeout_s=20)
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
