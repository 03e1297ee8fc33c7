"""The widgets of :class:`labs.panels.panel.StreamPanel`: a status line, a replay button, three charts.

Made to be read from the back of a classroom: the charts take the notebook's full width,
each has its own axis titles with units, the y axes start at 0 with a sensible range (a
flat 0 is drawn as a flat 0, not as the middle of -1..1), and every consumer keeps its
colour from run to run (:func:`consumer_colour`). The charts:

1. the group's lag: entries in the stream not yet delivered to the group;
2. the age of the oldest unacknowledged entry: how long the oldest work has been waiting;
3. entries in the PEL per consumer (XPENDING summary), one line each. This chart is the
   rightmost so that the legend, on the right, sits beside the only chart that needs one.

Only widget values are set here; nothing prints. plotly 6 and later build ``FigureWidget``
on ``anywidget``; without a frontend the widgets are plain objects.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labs.panels.sample import PanelSample
from labs.panels.style import FONT_SIZE, MIN_X_SPAN_S, figure_widget, keep_for_reload, status_html, style_layout

MAX_CONSUMER_TRACES = 8
MAX_POINTS = 600
LAG_COL, AGE_COL, PENDING_COL = 1, 2, 3
HEIGHT_PX = 400
# Okabe-Ito, colour-blind safe and readable on a projector (its yellow left out).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")
LAG_COLOUR, AGE_COLOUR = "#34495E", "#8C564B"
# Smallest y range: a flat 0 still shows a readable axis from 0.
MIN_Y_SPAN = {PENDING_COL: 5.0, LAG_COL: 5.0, AGE_COL: 1.0}
_RANDOM_SEGMENT = re.compile(r"[0-9a-f]{8,}")


def consumer_colour(name: str) -> str:
    """A colour that depends on the name only: ``billing-1`` is always blue, ``billing-2`` orange.

    A trailing number picks the palette entry (so numbered consumers never share one);
    any other name takes the entry of its CRC-32.
    """
    match = re.search(r"(\d+)$", name)
    index = int(match.group(1)) - 1 if match else zlib.crc32(name.encode())
    return PALETTE[index % len(PALETTE)]


def short_key(key: str) -> str:
    """The key without a notebook's or a test's random prefix: ``nb02:1a2b3c4d:live`` -> ``live``."""
    parts = key.split(":")
    for index in range(len(parts) - 1, -1, -1):
        if _RANDOM_SEGMENT.fullmatch(parts[index]) and index < len(parts) - 1:
            return ":".join(parts[index + 1 :])
    return key


def _y_max(values: Sequence[float | None], col: int) -> float:
    """Headroom above the top value (and the top tick), so a line never runs into the title."""
    top = max((v for v in values if v is not None), default=0.0)
    return max(MIN_Y_SPAN[col], top) * 1.15


class PanelFigure:
    """Owns the FigureWidget, the status line and the replay button; :meth:`draw` redraws."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.figure = figure_widget(self._layout())
        self.label = widgets.HTML(value=self._status_html("ещё не запущена"))
        self.replay_button = widgets.Button(
            description="повторить",
            icon="play",
            tooltip="проиграть записанные замеры заново",
            disabled=True,
            layout=widgets.Layout(width="auto", flex="0 0 auto"),
        )
        header = widgets.HBox([self.replay_button, self.label], layout=widgets.Layout(align_items="center"))
        self.widget = widgets.VBox([header, self.figure], layout=widgets.Layout(width="100%"))
        self.widget.add_class("stream-panel")
        self.label.add_class("stream-panel-status")
        self._consumer_traces: dict[str, int] = {}

    def _layout(self) -> go.Figure:
        fig = make_subplots(
            rows=1,
            cols=3,
            horizontal_spacing=0.1,  # room for the next chart's tick labels and axis title
            subplot_titles=("lag группы: ещё не выдано", "самая старая запись в PEL", "в PEL по консьюмерам"),
        )
        fig.add_scatter(x=[], y=[], name="lag", mode="lines", line={"color": LAG_COLOUR, "width": 3},
                        showlegend=False, row=1, col=LAG_COL)
        fig.add_scatter(x=[], y=[], name="возраст", mode="lines", line={"color": AGE_COLOUR, "width": 3},
                        showlegend=False, row=1, col=AGE_COL)
        style_layout(
            fig,
            height_px=HEIGHT_PX,
            margin={"t": 40, "b": 55, "l": 65, "r": 15},
            legend={"x": 1.01, "y": 1.0, "xanchor": "left", "yanchor": "top", "title": {"text": "консьюмер"}},
        )
        fig.update_annotations(font_size=FONT_SIZE + 1, yshift=6)  # the subplot titles
        fig.update_yaxes(rangemode="tozero")
        for col, title in ((LAG_COL, "записей"), (AGE_COL, "возраст, с"), (PENDING_COL, "записей в PEL")):
            fig.update_yaxes(title_text=title, range=[0, _y_max([], col)], row=1, col=col)
        return fig

    def on_replay(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` when the replay button is clicked."""
        self.replay_button.on_click(lambda _button: callback())

    def reset(self) -> None:
        """Forget the previous run: empty every line, drop the consumer lines."""
        self._consumer_traces = {}
        self.figure.data = self.figure.data[:2]
        with self.figure.batch_update():
            for trace in self.figure.data:
                trace.x, trace.y = [], []
        self.show_status("запускается")
        keep_for_reload(self.figure)

    def _status_html(self, text: str) -> str:
        return status_html(self.title, text, font_px=FONT_SIZE + 1)

    def show_status(self, text: str) -> None:
        self.label.value = self._status_html(text)

    def _ensure_traces(self, names: Sequence[str]) -> None:
        for name in names:
            if name in self._consumer_traces or len(self._consumer_traces) >= MAX_CONSUMER_TRACES:
                continue
            colour = consumer_colour(name)
            self.figure.add_scatter(
                x=[], y=[], name=name, mode="lines", line={"color": colour, "width": 3}, row=1, col=PENDING_COL
            )
            self._consumer_traces[name] = len(self.figure.data) - 1

    def draw(self, history: Sequence[PanelSample]) -> None:
        """Redraw every line from ``history`` (the last ``MAX_POINTS`` samples)."""
        points = list(history)[-MAX_POINTS:]
        self._ensure_traces(sorted({name for s in points for name in s.pending_by_consumer}))
        xs = [s.t_s for s in points]
        lags = [s.lag for s in points]
        # An empty PEL has nothing waiting: its oldest entry's age reads as 0.
        ages = [(s.oldest_pending_age_ms or 0) / 1000 for s in points]
        pending: dict[int, list[float | None]] = {}
        with self.figure.batch_update():
            lag, age = self.figure.data[0], self.figure.data[1]
            lag.x, lag.y = xs, lags
            age.x, age.y = xs, ages
            for name, index in self._consumer_traces.items():
                # XPENDING's summary lists only consumers with pending entries: absent = 0.
                pending[index] = [s.pending_by_consumer.get(name, 0) for s in points]
                trace = self.figure.data[index]
                trace.x, trace.y = xs, pending[index]
            self._set_ranges(xs, [v for ys in pending.values() for v in ys], lags, ages)
        keep_for_reload(self.figure)

    def _set_ranges(
        self, xs: list[float], pending: Sequence[float | None], lags: Sequence[float | None], ages: Sequence[float]
    ) -> None:
        layout = self.figure.layout
        x_range = [0, max(MIN_X_SPAN_S, xs[-1] if xs else 0.0)]
        for axis in (layout.xaxis, layout.xaxis2, layout.xaxis3):
            axis.range = x_range
        layout.yaxis.range = [0, _y_max(lags, LAG_COL)]
        layout.yaxis2.range = [0, _y_max(ages, AGE_COL)]
        layout.yaxis3.range = [0, _y_max(pending, PENDING_COL)]
