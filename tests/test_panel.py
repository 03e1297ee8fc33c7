"""The live panel against real Redis: samples, pending per consumer, stopping, surviving errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from labs.launcher.topology import Topology
from labs.panels.panel import StreamPanel

pytestmark = pytest.mark.timeout(30)


def wait_until(predicate: Callable[[], Any], timeout_s: float = 5.0, poll_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


def _url(client: redis.Redis) -> str:
    kwargs = client.get_connection_kwargs()
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def test_samples_show_pending_per_consumer_lag_and_age(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    for i in range(10):
        redis_client.xadd(stream, {"i": i})
    redis_client.xreadgroup("billing", "billing-1", {stream: ">"}, count=3)
    redis_client.xreadgroup("billing", "billing-2", {stream: ">"}, count=2)
    with StreamPanel(_url(redis_client), stream=stream, group="billing", refresh_s=0.05, max_duration_s=10) as panel:
        assert panel.running
        assert panel.wait_for_samples(2)
    last = panel.samples[-1]
    assert last.length == 10
    assert last.pending_by_consumer == {"billing-1": 3, "billing-2": 2}
    assert last.pending == 5
    assert last.lag == 5
    assert last.stream_age_ms is not None and last.stream_age_ms >= 0
    assert [s.t_s for s in panel.samples] == sorted(s.t_s for s in panel.samples)


def _pending_of(panel: StreamPanel, consumer: str) -> int | None:
    samples = panel.samples
    return samples[-1].pending_by_consumer.get(consumer, 0) if samples else None


def test_pending_grows_as_a_consumer_fails(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    panel = StreamPanel(_url(redis_client), stream=stream, group="billing", refresh_s=0.05).start()
    try:
        for i in range(5):
            redis_client.xadd(stream, {"i": i})
            redis_client.xreadgroup("billing", "billing-2", {stream: ">"}, count=1)  # never acked
            assert wait_until(lambda n=i + 1: _pending_of(panel, "billing-2") == n)
    finally:
        panel.stop()
    series = [s.pending_by_consumer.get("billing-2", 0) for s in panel.samples]
    assert series[0] < series[-1] == 5


def test_missing_stream_and_group_read_as_empty(redis_client: redis.Redis, key_prefix: str) -> None:
    with StreamPanel(_url(redis_client), stream=f"{key_prefix}none", group="g", refresh_s=0.05) as panel:
        assert panel.wait_for_samples(1)
    sample = panel.samples[0]
    assert (sample.length, sample.pending_by_consumer) == (0, {})
    assert (sample.lag, sample.stream_age_ms) == (None, None)
    assert panel.errors == 0


def test_stop_is_idempotent_and_ends_the_thread(redis_client: redis.Redis, key_prefix: str) -> None:
    panel = StreamPanel(_url(redis_client), stream=f"{key_prefix}s", group="g", refresh_s=0.05)
    panel.stop()  # before start: harmless
    assert panel.start() is panel
    assert panel.start() is panel  # already running: a no-op
    assert panel.wait_for_samples(1)
    panel.stop()
    panel.stop()
    assert not panel.running
    assert panel.stop_reason == "stop()"
    count = len(panel.samples)
    time.sleep(0.2)
    assert len(panel.samples) == count
    assert "stopped" in panel.widget.children[0].value


def test_stops_by_itself_after_max_duration(redis_client: redis.Redis, key_prefix: str) -> None:
    panel = StreamPanel(
        _url(redis_client), stream=f"{key_prefix}s", group="g", refresh_s=0.05, max_duration_s=0.5
    ).start()
    assert wait_until(lambda: not panel.running, timeout_s=5)
    assert panel.stop_reason is not None and panel.stop_reason.startswith("max_duration_s")
    assert panel.samples and panel.samples[-1].t_s < 0.5


def test_a_redis_error_is_shown_and_does_not_kill_the_thread(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}s"
    redis_client.set(stream, "not a stream")  # WRONGTYPE on every sample
    with StreamPanel(_url(redis_client), stream=stream, group="g", refresh_s=0.02) as panel:
        assert wait_until(lambda: panel.errors >= 2)
        assert panel.running
        assert "WRONGTYPE" in panel.widget.children[0].value
        redis_client.delete(stream)
        redis_client.xadd(stream, {"i": 1})
        assert wait_until(lambda: bool(panel.samples) and panel.samples[-1].length == 1, timeout_s=8)


def test_survives_a_dead_server_and_resumes(topology_factory: Callable[..., Topology]) -> None:
    topo = topology_factory("single")
    client = topo.servers[0].client()
    client.xadd("orders", {"i": 1})
    with StreamPanel(topo.url, stream="orders", group="billing", refresh_s=0.05) as panel:
        assert panel.wait_for_samples(1)
        topo.kill()
        assert wait_until(lambda: panel.errors >= 1)
        assert panel.running
        assert "error" in panel.widget.children[0].value.lower()
        topo.ensure()  # a new empty server (no persistence) on the same port
        before = len(panel.samples)
        assert wait_until(lambda: len(panel.samples) > before, timeout_s=10)
    assert panel.samples[-1].length == 0
    client.close()


def test_stop_takes_one_last_sample(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    panel = StreamPanel(_url(redis_client), stream=stream, group="billing", refresh_s=10.0).start()
    assert panel.wait_for_samples(1)
    for i in range(3):
        redis_client.xadd(stream, {"i": i})
    panel.stop()
    assert not panel.running and panel.stop_reason == "stop()"
    assert [s.length for s in panel.samples] == [0, 3]  # the frozen panel shows the state at stop()
