"""labs.compare.charts: the timeline around the kill and the latency distributions, from rows' own records."""

from __future__ import annotations

import pytest

from labs.compare import charts
from labs.compare.scenarios import Row

pytestmark = pytest.mark.timeout(30)


def _row(broker: str, gap_from_s: float, gap_to_s: float) -> Row:
    times = [t / 40 for t in range(0, 160) if not gap_from_s <= t / 40 < gap_to_s]  # 40 charges/s, a gap
    return {"broker": broker, "case": "leader-kill", "kill_at_s": 1.0, "charge_times_s": times, "charged": len(times),
            "latencies_ms": [1.0 + i % 7 for i in range(len(times))]}


def test_the_timeline_is_charges_per_second_around_the_kill_with_the_gap_at_zero() -> None:
    rows = [_row("redis", 1.0, 3.0), _row("nats", 1.0, 1.5), {"broker": "x", "case": "poison"}]
    fig = charts.timeline(rows)
    assert [trace.name for trace in fig.data] == ["redis", "nats"]  # rows of other cases are not drawn
    redis_line = dict(zip(fig.data[0].x, fig.data[0].y, strict=True))
    assert redis_line[-0.5] == pytest.approx(40) and redis_line[0.0] == 0 and redis_line[1.75] == 0
    assert redis_line[2.0] == pytest.approx(40)  # back after the gap: the kill is at x = 0
    assert "списаний" in fig.layout.yaxis.title.text
    assert "charges" in charts.timeline(rows, lang="en").layout.yaxis.title.text  # make compare's report


def test_the_latency_distribution_rises_to_one_per_broker_and_case() -> None:
    rows = [_row("redis", 1.0, 1.2), _row("rabbitmq", 1.0, 1.2)]
    fig = charts.latency_cdf(rows, cases=("leader-kill",))
    assert [trace.name for trace in fig.data] == ["redis", "rabbitmq"]
    for trace in fig.data:
        assert list(trace.x) == sorted(trace.x) and trace.y[-1] == pytest.approx(1.0) and trace.y[0] > 0
    assert fig.layout.xaxis.type == "log"


def test_the_window_sweep_and_the_load_curve_draw_every_row_from_its_rows() -> None:
    rows: list[Row] = [{"broker": b, "case": f"window-{w}", "window": w, "publish_per_s": 100.0 * w}
                       for b in ("redis", "nats") for w in (1, 16, 256)]
    rows += [{"broker": "nats", "case": f"load-{s}%", "offered_per_s": 10.0 * s, "p50_ms": 2.0, "p99_ms": 9.0}
             for s in (25, 50)]
    sweep = charts.window_sweep(rows)
    assert [t.name for t in sweep.data] == ["redis", "nats"] and list(sweep.data[0].x) == [1, 16, 256]
    assert sweep.layout.xaxis.type == "log"
    load = charts.load_curve(rows, lang="en")
    assert [t.name for t in load.data] == ["nats p50", "nats p99"] and list(load.data[1].y) == [9.0, 9.0]
    assert [name for name, _fig in charts.report_figures(rows)][:2] == ["publish window sweep", "latency under load"]
