"""The live metrics dashboard without a browser: a real prometheus_client endpoint and real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

import labs.panels.dashboard_figure as dashboard_figure
from labs.launcher.ports import free_port
from labs.panels.dashboard import MetricsDashboard
from labs.panels.dashboard_sample import DashboardSample
from labs.panels.scrape import WorkerNumbers

pytestmark = pytest.mark.timeout(30)


class Endpoint:
    """A worker-like /metrics endpoint whose numbers the test moves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.processed = Counter("billing_processed", "processed", registry=self.registry)
        self.errors = Counter("billing_errors", "errors", registry=self.registry)
        self.pending = Gauge("billing_pending", "pending", registry=self.registry)
        self.group_lag = Gauge("billing_group_lag", "lag", registry=self.registry)
        self.age = Gauge("billing_stream_age_seconds", "age", registry=self.registry)
        self.lag = Histogram("billing_processing_lag_seconds", "lag", registry=self.registry)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint()
    server, thread = start_http_server(ep.port, addr="127.0.0.1", registry=ep.registry)
    try:
        yield ep
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _url(client: redis.Redis) -> str:
    kwargs = client.get_connection_kwargs()
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def test_samples_worker_and_redis_numbers_then_stops(
    endpoint: Endpoint, redis_client: redis.Redis, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    for i in range(6):
        redis_client.xadd(stream, {"i": i})
    redis_client.xreadgroup("billing", "w1", {stream: ">"}, count=2)
    board = MetricsDashboard(endpoint.url, redis_url=_url(redis_client), stream=stream, refresh_s=0.05,
                             max_duration_s=20)
    with board:
        assert board.running
        endpoint.processed.inc(7)
        endpoint.pending.set(2)
        endpoint.lag.observe(0.5)
        assert board.wait_for(lambda ss: ss and ss[-1].worker and ss[-1].worker.processed == 7)
        endpoint.processed.inc(10)
        assert board.wait_for(lambda ss: ss[-1].worker.processed == 17)
        assert "идёт" in board.figure.status.value
    assert not board.running and board.stop_reason == "stop()"
    last = board.samples[-1]
    assert last.worker is not None and last.redis is not None
    assert (last.worker.pending, last.redis.pending_total, last.redis.lag, last.redis.length) == (2, 2, 4, 6)
    assert any(s.processed_per_s for s in board.samples)  # a rate from two scrapes
    assert "остановлен: вызван stop()" in board.figure.status.value and "processed 17" in board.figure.status.value
    assert capsys.readouterr() == ("", "")  # the thread never prints


def test_stops_by_itself_and_redraws_the_whole_history(endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard_figure, "LIVE_POINTS", 3)
    board = MetricsDashboard(endpoint.url, refresh_s=0.05, max_duration_s=0.6).start()
    assert board.wait_for(lambda ss: len(ss) >= 5)
    assert len(board.figure.trace("processed").x) <= 3  # live: only the last few points
    assert board._thread is not None
    board._thread.join(5)
    assert not board.running and board.stop_reason == "max_duration_s=0.6"
    samples = board.samples
    assert list(board.figure.trace("processed").x) == [s.t_s for s in samples]  # at the end: all of them
    assert "прошло 0.6 с" in board.figure.status.value
    board.stop()  # idempotent after a self-stop


def test_stops_by_itself_once_the_worker_is_idle(endpoint: Endpoint) -> None:
    endpoint.pending.set(3)
    endpoint.group_lag.set(0)
    board = MetricsDashboard(endpoint.url, refresh_s=0.05, max_duration_s=20, idle_stop_s=0.3).start()
    assert board.wait_for(lambda ss: len(ss) >= 10)
    assert board.running  # nothing processed yet and 3 pending: not over
    endpoint.processed.inc(3)
    endpoint.pending.set(0)
    assert board.wait_stopped(5)
    assert board.stop_reason == "idle_stop_s=0.3"
    assert "прогон закончен" in board.figure.status.value
    worker = board.samples[-1].worker
    assert worker is not None and worker.processed == 3


def test_an_unreachable_worker_is_shown_not_fatal() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with MetricsDashboard(url, refresh_s=0.05, max_duration_s=10) as board:
        assert board.wait_for(lambda ss: len(ss) >= 2)
        assert board.running
        assert "не отвечает" in board.figure.status.value
    assert all(s.worker is None and "не отвечает" in s.problem for s in board.samples)
    assert board.problems >= 2


def test_axis_titles_and_ranges() -> None:
    figure = MetricsDashboard("http://127.0.0.1:1/metrics").figure
    layout = figure.figure.layout
    assert all(axis.title.text for axis in (layout.xaxis, layout.yaxis, layout.yaxis2, layout.yaxis3, layout.yaxis4))
    figure.draw([DashboardSample(t, WorkerNumbers(processed=100 * t, pending=0), None) for t in (1.0, 2.0)])
    assert list(layout.yaxis.range) == [0, pytest.approx(230)]  # from 0, with headroom
    assert list(layout.yaxis3.range) == [0, 5.0]  # a flat 0 keeps a readable axis
    assert list(layout.xaxis.range) == [1.0, 2.0]
    with pytest.raises(ValueError, match="positive"):
        MetricsDashboard("http://x", refresh_s=0)
