"""The live panel against real Redis: samples, pending per consumer, stopping, surviving errors."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from billing_support import wait_until

from labs.launcher.topology import Topology
from labs.panels.figure import PALETTE, consumer_colour, short_key
from labs.panels.panel import StreamPanel

pytestmark = pytest.mark.timeout(30)


def _status(panel: StreamPanel) -> str:
    """The status line's HTML."""
    return str(panel._figure.label.value)


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
            wait_until(lambda n=i + 1: _pending_of(panel, "billing-2") == n, 5, "the panel's state")
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
    assert "остановлена: работа закончилась" in _status(panel)


def test_stops_by_itself_after_max_duration(redis_client: redis.Redis, key_prefix: str) -> None:
    panel = StreamPanel(
        _url(redis_client), stream=f"{key_prefix}s", group="g", refresh_s=0.05, max_duration_s=0.5
    ).start()
    wait_until(lambda: not panel.running, 5, "the panel's state")
    assert panel.stop_reason is not None and panel.stop_reason.startswith("max_duration_s")
    assert "остановлена: прошло 0.5 с" in _status(panel)
    # t_s is rounded to milliseconds, so a sample taken at 0.4996 s reads 0.5: the bound is <=.
    assert panel.samples and panel.samples[-1].t_s <= 0.5


def test_a_redis_error_is_shown_and_does_not_kill_the_thread(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}s"
    redis_client.set(stream, "not a stream")  # WRONGTYPE on every sample
    with StreamPanel(_url(redis_client), stream=stream, group="g", refresh_s=0.02) as panel:
        wait_until(lambda: panel.errors >= 2, 5, "the panel's state")
        assert panel.running
        assert "WRONGTYPE" in _status(panel) and "ошибка Redis" in _status(panel)
        redis_client.delete(stream)
        redis_client.xadd(stream, {"i": 1})
        wait_until(lambda: bool(panel.samples) and panel.samples[-1].length == 1, 8, "the panel's state")


def test_survives_a_dead_server_and_resumes(topology_factory: Callable[..., Topology]) -> None:
    topo = topology_factory("single")
    client = topo.servers[0].client()
    client.xadd("orders", {"i": 1})
    with StreamPanel(topo.url, stream="orders", group="billing", refresh_s=0.05) as panel:
        assert panel.wait_for_samples(1)
        topo.kill()
        wait_until(lambda: panel.errors >= 1, 5, "the panel's state")
        assert panel.running
        assert "ошибка Redis" in _status(panel)
        topo.ensure()  # a new empty server (no persistence) on the same port
        before = len(panel.samples)
        wait_until(lambda: len(panel.samples) > before, 10, "the panel's state")
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


def test_status_is_in_words_and_the_title_has_no_random_prefix(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    redis_client.xadd(stream, {"i": 0})
    panel = StreamPanel(_url(redis_client), stream=stream, group="billing", refresh_s=0.05).start()
    try:
        wait_until(lambda: "идёт:" in _status(panel), 5, "the panel's state")
        assert "XLEN 1 · в PEL 0 · lag 1" in _status(panel)
    finally:
        panel.stop()
    assert "<b>orders · группа billing</b>" in _status(panel)
    assert key_prefix not in _status(panel)
    assert "остановлена: работа закончилась" in _status(panel)


def test_short_key_drops_a_random_prefix_only() -> None:
    assert short_key("nb02:1a2b3c4d:live") == "live"
    assert short_key("test:name:0123abcd:orders:dlq") == "orders:dlq"
    assert short_key("orders") == "orders"
    assert short_key("lab1:persistence") == "lab1:persistence"


def test_consumer_colours_depend_on_the_name_only() -> None:
    assert consumer_colour("billing-1") == PALETTE[0] == consumer_colour("worker-1")
    assert consumer_colour("billing-2") == PALETTE[1]
    assert len({consumer_colour(f"billing-{i}") for i in range(1, len(PALETTE) + 1)}) == len(PALETTE)
    assert consumer_colour("rescuer") == consumer_colour("rescuer") in PALETTE


def test_figure_has_units_and_axes_from_zero(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    redis_client.xadd(stream, {"i": 0})
    redis_client.xreadgroup("billing", "billing-2", {stream: ">"})  # one entry waits in the PEL
    with StreamPanel(_url(redis_client), stream=stream, group="billing", refresh_s=0.05) as panel:
        assert panel.wait_for_samples(3)
    layout = panel._figure.figure.layout
    assert layout.width is None and layout.autosize  # the notebook's full width
    assert [a.title.text for a in (layout.yaxis, layout.yaxis2, layout.yaxis3)] == [
        "записей", "возраст, с", "записей в PEL"
    ]
    assert all(a.title.text == "время, с" for a in (layout.xaxis, layout.xaxis2, layout.xaxis3))
    assert tuple(layout.yaxis.range) == (0, pytest.approx(5.75))  # a flat 0 lag: from 0 to 5, not -1..1
    assert layout.yaxis2.range[0] == layout.yaxis3.range[0] == 0
    traces = {t.name: t for t in panel._figure.figure.data}
    assert traces["billing-2"].line.color == consumer_colour("billing-2")
    assert [name for name, t in traces.items() if t.showlegend is not False] == ["billing-2"]
    assert panel.samples[-1].oldest_pending_age_ms is not None


def test_replay_redraws_the_recorded_samples(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xgroup_create(stream, "billing", "0", mkstream=True)
    panel = StreamPanel(_url(redis_client), stream=stream, group="billing", refresh_s=0.05)
    assert panel.replay() is panel and not panel.replaying  # nothing recorded yet: a no-op
    with panel:
        for i in range(3):
            redis_client.xadd(stream, {"i": i})
            wait_until(lambda n=i + 1: bool(panel.samples) and panel.samples[-1].length == n, 5, "the panel's state")
    recorded = panel.samples
    assert not panel._figure.replay_button.disabled
    panel.replay(speed=10.0)
    wait_until(lambda: not panel.replaying, 10, "the panel's state")
    assert "повтор окончен" in _status(panel)
    assert list(panel._figure.figure.data[0].x) == [s.t_s for s in recorded]
    assert panel.samples == recorded  # a replay records nothing new


def test_the_saved_widget_state_is_the_last_drawing_so_a_reload_redraws_it() -> None:
    from labs.panels.figure import PanelFigure
    from labs.panels.sample import PanelSample

    figure = PanelFigure("orders · группа billing")
    history = [
        PanelSample(t_s=float(t), length=600, pending_by_consumer={"billing-2": 3 * t}, lag=600 - 10 * t,
                    stream_age_ms=0, oldest_pending_age_ms=100 * t)
        for t in range(12)
    ]
    figure.draw(history)
    saved_data, saved_layout = figure.figure._widget_data, figure.figure._widget_layout
    lag = next(trace for trace in saved_data if list(trace.get("y", [])) == [s.lag for s in history])
    assert list(lag["x"]) == [s.t_s for s in history]
    assert any(list(trace.get("y", [])) == [3 * t for t in range(12)] for trace in saved_data)  # billing-2's line
    assert saved_layout["yaxis"]["range"][1] >= 600 and saved_layout["xaxis"]["range"][1] >= 11  # rescaled
    assert len(saved_layout["annotations"]) >= 3  # the three charts' titles
