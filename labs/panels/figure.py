"""The widgets of :class:`labs.panels.panel.StreamPanel`: a plotly FigureWidget and a status label.

Three charts side by side: XPENDING per consumer over time (one line per consumer, the
busiest ``MAX_CONSUMER_TRACES`` of them), the group's lag, and the stream's age (how old its
oldest entry is). Only widget values are set here; nothing prints. plotly 6 and later
build ``FigureWidget`` on ``anywidget``; without a frontend the widgets are plain objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labs.panels.sample import PanelSample

MAX_CONSUMER_TRACES = 8
MAX_POINTS = 600
PENDING_COL, LAG_COL, AGE_COL = 1, 2, 3


class PanelFigure:
    """Owns the FigureWidget and the label; :meth:`draw` redraws from the sample history."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.figure: Any = go.FigureWidget(self._layout())
        self.label = widgets.HTML(value="not started")
        self.widget = widgets.VBox([self.label, self.figure])
        self._consumer_traces: dict[str, int] = {}

    def _layout(self) -> Any:
        fig = make_subplots(
            rows=1,
            cols=3,
            subplot_titles=("XPENDING per consumer", "group lag (entries)", "stream age (s)"),
        )
        fig.add_scatter(x=[], y=[], name="lag", mode="lines", row=1, col=LAG_COL)
        fig.add_scatter(x=[], y=[], name="stream age", mode="lines", row=1, col=AGE_COL)
        fig.update_layout(title=self.title, height=320, margin={"t": 70, "b": 40, "l": 40, "r": 20}, showlegend=True)
        fig.update_xaxes(title_text="t, s")
        return fig

    def reset(self) -> None:
        """Forget the previous run: empty every line, drop the consumer lines."""
        self._consumer_traces = {}
        self.figure.data = self.figure.data[:2]
        with self.figure.batch_update():
            for trace in self.figure.data:
                trace.x, trace.y = [], []
        self.label.value = "starting"

    def show_status(self, text: str) -> None:
        self.label.value = f"<b>{self.title}</b> · {text}"

    def _ensure_traces(self, names: Sequence[str]) -> None:
        for name in names:
            if name in self._consumer_traces or len(self._consumer_traces) >= MAX_CONSUMER_TRACES:
                continue
            self.figure.add_scatter(x=[], y=[], name=name, mode="lines+markers", row=1, col=PENDING_COL)
            self._consumer_traces[name] = len(self.figure.data) - 1

    def draw(self, history: Sequence[PanelSample]) -> None:
        """Redraw every line from ``history`` (the last ``MAX_POINTS`` samples)."""
        points = list(history)[-MAX_POINTS:]
        seen = sorted({name for s in points for name in s.pending_by_consumer})
        self._ensure_traces(seen)
        xs = [s.t_s for s in points]
        with self.figure.batch_update():
            lag, age = self.figure.data[0], self.figure.data[1]
            lag.x, lag.y = xs, [s.lag for s in points]
            age.x = xs
            age.y = [None if s.stream_age_ms is None else s.stream_age_ms / 1000 for s in points]
            for name, index in self._consumer_traces.items():
                trace = self.figure.data[index]
                # XPENDING's summary lists only consumers with pending entries: absent = 0.
                trace.x, trace.y = xs, [s.pending_by_consumer.get(name, 0) for s in points]
