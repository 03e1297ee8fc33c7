"""The widgets of :class:`labs.panels.dashboard.MetricsDashboard`: four charts and a status line.

Laid out for a classroom projector: full width, large type, a short title, axis titles with
units, one fixed colour per metric (the worker's number solid, the same number measured in
Redis dotted, so the two can be compared at a glance). Only widget values are set here;
nothing prints. plotly 6+ builds ``FigureWidget`` on ``anywidget``; without a frontend the
widgets are plain objects and the traces still hold the data (tests read them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

LIVE_POINTS = 400  # while running, draw the last N samples; stop() redraws them all


@dataclass(frozen=True)
class Line:
    """One trace: its legend name, chart, colour, dash and how to read it off a sample."""

    name: str
    row: int
    col: int
    color: str
    value: Callable[[Any], float | None]
    dash: str = "solid"


def _get(source: str, field: str) -> Callable[[Any], float | None]:
    def read(sample: Any) -> float | None:
        part = getattr(sample, source)
        return None if part is None else getattr(part, field)

    return read


LINES: tuple[Line, ...] = (
    Line("processed", 1, 1, "#1f77b4", _get("worker", "processed")),
    Line("errors", 1, 1, "#d62728", _get("worker", "errors")),
    Line("reclaimed", 1, 1, "#ff7f0e", _get("worker", "reclaimed")),
    Line("processed/s", 1, 2, "#1f77b4", lambda s: s.processed_per_s),
    Line("errors/s", 1, 2, "#d62728", lambda s: s.errors_per_s),
    Line("pending (worker)", 2, 1, "#9467bd", _get("worker", "pending")),
    Line("pending (XPENDING)", 2, 1, "#9467bd", _get("redis", "pending_total"), "dot"),
    Line("group lag (worker)", 2, 1, "#2ca02c", _get("worker", "group_lag")),
    Line("group lag (XINFO)", 2, 1, "#2ca02c", _get("redis", "lag"), "dot"),
    Line("stream age", 2, 2, "#8c564b", _get("worker", "stream_age_s")),
    Line("processing lag", 2, 2, "#17becf", lambda s: s.processing_lag_s),
)
TITLES = ("handled so far (messages)", "throughput (messages/s)", "backlog (messages)", "ages (s)")


class DashboardFigure:
    """Owns the FigureWidget and the status line; :meth:`draw` redraws every line from samples."""

    def __init__(self, title: str, height_px: int = 560) -> None:
        self.title = title
        self.figure: Any = go.FigureWidget(self._layout(height_px))
        self.status = widgets.HTML(value=self._status_html("not started"), layout=widgets.Layout(width="100%"))
        self.widget = widgets.VBox([self.status, self.figure], layout=widgets.Layout(width="100%"))

    def _layout(self, height_px: int) -> Any:
        fig = make_subplots(rows=2, cols=2, subplot_titles=TITLES, horizontal_spacing=0.08, vertical_spacing=0.16)
        for line in LINES:
            fig.add_scatter(
                x=[], y=[], name=line.name, mode="lines", row=line.row, col=line.col,
                line={"color": line.color, "dash": line.dash, "width": 3},
            )
        fig.update_layout(
            title={"text": self.title, "x": 0.01},
            height=height_px,
            autosize=True,
            font={"size": 15},
            margin={"t": 80, "b": 60, "l": 70, "r": 20},
            legend={"orientation": "v", "x": 1.01, "y": 1},
        )
        fig.update_xaxes(title_text="time since start (s)", rangemode="tozero")
        units = {(1, 1): "messages", (1, 2): "messages/s", (2, 1): "messages", (2, 2): "seconds"}
        for (row, col), unit in units.items():
            fig.update_yaxes(title_text=unit, rangemode="tozero", row=row, col=col)
        return fig

    def _status_html(self, text: str) -> str:
        return f'<div style="font-size:18px;line-height:1.4"><b>{self.title}</b> · {text}</div>'

    def show_status(self, text: str) -> None:
        self.status.value = self._status_html(text)

    def draw(self, samples: Sequence[Any], *, all_points: bool = False) -> None:
        """Redraw every line from ``samples`` (the last :data:`LIVE_POINTS`, or all of them)."""
        points = list(samples) if all_points else list(samples)[-LIVE_POINTS:]
        xs = [s.t_s for s in points]
        with self.figure.batch_update():
            for trace, line in zip(self.figure.data, LINES, strict=True):
                trace.x, trace.y = xs, [line.value(s) for s in points]

    def trace(self, name: str) -> Any:
        """The trace called ``name`` (for tests and asserts)."""
        return next(t for t in self.figure.data if t.name == name)
