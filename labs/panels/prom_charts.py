"""PromQL charts for notebook 10: range queries from Prometheus's HTTP API drawn with plotly.

>>> fig = range_figure(api, [Chart("Отставание группы", "секунды", (Line("stream_group:lag_seconds", "{stream}"),))],
...                    start=t0, end=t1, marks=[Mark(t_fault, "workers stopped"), ...])

One subplot per :class:`Chart` (its title, the unit on the y axis, an optional threshold line),
time on a shared x axis in seconds from ``start`` (as the other panels draw time), and a
vertical line per :class:`Mark`: the fault, and the evaluation at which each alert fired.
The data comes only from ``/api/v1/query_range``, so the picture is what Prometheus stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labs.launcher.prom_api import PrometheusAPI
from labs.panels.style import FONT_SIZE

ALERT_COLOUR = "#d62728"
FAULT_COLOUR = "#555555"


@dataclass(frozen=True)
class Line:
    """One PromQL expression; ``legend`` is formatted with the series' labels (``"{stream}"``)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    lines: tuple[Line, ...]
    threshold: float | None = None
    threshold_text: str = ""


@dataclass(frozen=True)
class Mark:
    """A vertical line at unix time ``at``: a fault (grey) or an alert that fired (red)."""

    at: float
    text: str
    alert: bool = False


@dataclass
class Drawn:
    """What a figure holds, for asserts: points per legend, and the marks drawn."""

    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)


def _legend(template: str, labels: dict[str, str]) -> str:
    try:
        return template.format(**labels)
    except (KeyError, IndexError):
        return template


Points = list[tuple[float, float]]


def fetch(api: PrometheusAPI, line: Line, start: float, end: float, step_s: float) -> dict[str, Points]:
    """``query_range`` of one line: legend -> [(unix time, value)] (NaN and Inf points dropped)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in api.query_range(line.expr, start, end, step_s):
        points = [(float(t), float(v)) for t, v in series["values"] if v not in ("NaN", "+Inf", "-Inf")]
        out.setdefault(_legend(line.legend, series["metric"]), []).extend(points)
    return out


def _with_gaps(points: Points, start: float, step_s: float) -> tuple[list[float | None], list[float | None]]:
    """x (seconds from ``start``) and y, with a None where samples are missing: plotly then breaks the
    line instead of drawing a straight one across the gap (a series that vanished and came back)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for i, (t, v) in enumerate(points):
        if i and t - points[i - 1][0] > 1.5 * step_s:
            xs.append(None)
            ys.append(None)
        xs.append(t - start)
        ys.append(v)
    return xs, ys


def range_figure(
    api: PrometheusAPI,
    charts: Sequence[Chart],
    *,
    start: float,
    end: float,
    step_s: float = 2.0,
    marks: Iterable[Mark] = (),
    title: str = "",
) -> tuple[go.Figure, Drawn]:
    """The figure and what it drew (so a notebook can assert that the picture holds the alerts)."""
    fig = make_subplots(rows=len(charts), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{c.title}, {c.unit}" for c in charts])
    drawn = Drawn(marks=list(marks))
    for row, chart in enumerate(charts, start=1):
        for line in chart.lines:
            for legend, points in fetch(api, line, start, end, step_s).items():
                drawn.points[legend] = points
                xs, ys = _with_gaps(points, start, step_s)
                fig.add_trace(go.Scatter(x=xs, y=ys, name=legend, mode="lines+markers", marker={"size": 4}),
                              row=row, col=1)
        fig.update_yaxes(title_text=chart.unit, row=row, col=1)
        if chart.threshold is not None:
            fig.add_hline(y=chart.threshold, line_dash="dot", line_color=ALERT_COLOUR, row=row, col=1,
                          annotation_text=chart.threshold_text, annotation_position="top left")
    for mark in drawn.marks:
        colour = ALERT_COLOUR if mark.alert else FAULT_COLOUR
        fig.add_vline(x=mark.at - start, line_dash="dash" if mark.alert else "solid", line_color=colour,
                      line_width=1.5, row="all", col=1)
        # the label once, above the charts
        fig.add_annotation(x=mark.at - start, y=1.04, xref="x", yref="paper", yanchor="bottom", text=mark.text,
                           textangle=-90, showarrow=False, font={"color": colour, "size": FONT_SIZE - 4})
    fig.update_xaxes(title_text="время от начала опыта, с", row=len(charts), col=1)
    fig.update_layout(title={"text": title, "y": 0.995, "yanchor": "top"}, height=300 * len(charts) + 230,
                      template="plotly_white", font={"size": FONT_SIZE - 2},
                      margin={"l": 70, "r": 20, "t": 230, "b": 60}, legend={"orientation": "h", "y": -0.1})
    return fig, drawn
