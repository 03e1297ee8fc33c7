"""The widgets of :class:`labs.panels.dashboard.MetricsDashboard`: a status line and four charts.

Made to be read from the back of a classroom, like :mod:`labs.panels.figure`: the charts take
the notebook's full width, each has axis titles with units, the y axes start at 0 (a flat 0
is drawn as a flat 0), the short title heads the status line, and every metric keeps one
colour (colour-blind safe Okabe-Ito). The worker's own number is a solid line; the same number measured in Redis
is a dotted line of the same colour, so the two can be compared at a glance:

1. handled so far: ``processed``, ``errors``, ``reclaimed`` (counters);
2. throughput: processed and errors per second (counter increase between two scrapes);
3. backlog: the group's pending and lag, from the worker and from Redis;
4. ages: the stream's age (its first entry) and the processing lag (id timestamp to done).

Only widget values are set here; nothing prints. plotly 6+ builds ``FigureWidget`` on
``anywidget``; without a frontend the widgets are plain objects and the traces still hold
the data (tests read them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labs.panels.dashboard_sample import DashboardSample
from labs.panels.style import FONT_SIZE, MIN_X_SPAN_S, figure_widget, keep_for_reload, status_html, style_layout

LIVE_POINTS = 400  # while running, draw the last N samples; stop() redraws them all
HEIGHT_PX = 600
MIN_Y_SPAN = (5.0, 5.0, 5.0, 1.0)  # per chart: a flat 0 still shows a readable axis
BLUE, VERMILION, ORANGE, PURPLE, GREEN, BROWN, SKY = (
    "#0072B2", "#D55E00", "#E69F00", "#CC79A7", "#009E73", "#8C564B", "#56B4E9",
)


@dataclass(frozen=True)
class Line:
    """One trace: its legend name, chart (1..4), colour, dash and how to read it off a sample."""

    name: str
    chart: int
    color: str
    value: Callable[[DashboardSample], float | None]
    dash: str = "solid"


def _get(source: str, field: str) -> Callable[[DashboardSample], float | None]:
    def read(sample: DashboardSample) -> float | None:
        part = getattr(sample, source)
        return None if part is None else getattr(part, field)

    return read


LINES: tuple[Line, ...] = (
    Line("processed", 1, BLUE, _get("worker", "processed")),
    Line("errors", 1, VERMILION, _get("worker", "errors")),
    Line("reclaimed", 1, ORANGE, _get("worker", "reclaimed")),
    Line("processed/s", 2, BLUE, lambda s: s.processed_per_s),
    Line("errors/s", 2, VERMILION, lambda s: s.errors_per_s),
    Line("pending (воркер)", 3, PURPLE, _get("worker", "pending")),
    Line("pending (XPENDING)", 3, PURPLE, _get("redis", "pending_total"), "dot"),
    Line("lag (воркер)", 3, GREEN, _get("worker", "group_lag")),
    Line("lag (XINFO GROUPS)", 3, GREEN, _get("redis", "lag"), "dot"),
    Line("stream age", 4, BROWN, _get("worker", "stream_age_s")),
    Line("processing lag", 4, SKY, lambda s: s.processing_lag_s),
)
TITLES = ("обработано, всего", "скорость", "PEL и lag группы", "возраст стрима и задержка")
Y_TITLES = ("сообщений", "сообщений/с", "записей", "секунд")
CELLS = ((1, 1), (1, 2), (2, 1), (2, 2))


class DashboardFigure:
    """Owns the FigureWidget and the status line; :meth:`draw` redraws every line from samples."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.figure = figure_widget(self._layout())
        self.status = widgets.HTML(value=self._status_html("ещё не запущен"), layout=widgets.Layout(width="100%"))
        self.widget = widgets.VBox([self.status, self.figure], layout=widgets.Layout(width="100%"))
        self.widget.add_class("metrics-dashboard")
        self.status.add_class("metrics-dashboard-status")

    def _layout(self) -> go.Figure:
        fig = make_subplots(rows=2, cols=2, subplot_titles=TITLES, horizontal_spacing=0.12, vertical_spacing=0.2)
        for line in LINES:
            row, col = CELLS[line.chart - 1]
            fig.add_scatter(
                x=[], y=[], name=line.name, mode="lines", row=row, col=col,
                line={"color": line.color, "dash": line.dash, "width": 3},
            )
        style_layout(
            fig,
            height_px=HEIGHT_PX,
            margin={"t": 40, "b": 60, "l": 75, "r": 15},
            legend={"x": 1.01, "y": 1.0, "xanchor": "left", "yanchor": "top"},
        )
        fig.update_annotations(font_size=FONT_SIZE + 1)  # the subplot titles
        for (row, col), unit, span in zip(CELLS, Y_TITLES, MIN_Y_SPAN, strict=True):
            fig.update_yaxes(title_text=unit, range=[0, span], row=row, col=col)
        return fig

    def _status_html(self, text: str) -> str:
        return status_html(self.title, text, font_px=FONT_SIZE + 3)

    def show_status(self, text: str) -> None:
        self.status.value = self._status_html(text)

    def draw(self, samples: Sequence[DashboardSample], *, all_points: bool = False) -> None:
        """Redraw every line from ``samples`` (the last :data:`LIVE_POINTS`, or all of them)."""
        points = list(samples) if all_points else list(samples)[-LIVE_POINTS:]
        xs = [s.t_s for s in points]
        tops = list(MIN_Y_SPAN)
        with self.figure.batch_update():
            for trace, line in zip(self.figure.data, LINES, strict=True):
                ys = [line.value(s) for s in points]
                trace.x, trace.y = xs, ys
                top = max((y for y in ys if y is not None), default=0.0)
                tops[line.chart - 1] = max(tops[line.chart - 1], 1.15 * top)
            layout = self.figure.layout
            x0 = xs[0] if xs else 0.0
            x_range = [x0, max(x0 + MIN_X_SPAN_S, xs[-1] if xs else 0.0)]
            for i, axis in enumerate((layout.xaxis, layout.xaxis2, layout.xaxis3, layout.xaxis4)):
                axis.range = x_range
                (layout.yaxis, layout.yaxis2, layout.yaxis3, layout.yaxis4)[i].range = [0, tops[i]]
        keep_for_reload(self.figure)

    def trace(self, name: str) -> go.Scatter:
        """The trace called ``name`` (for tests and asserts)."""
        return next(t for t in self.figure.data if t.name == name)
