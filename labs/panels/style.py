"""The classroom look both live panels share: font size, the title-and-status line, the charts' frame.

:mod:`labs.panels.figure` (the stream panel) and :mod:`labs.panels.dashboard_figure` (the
metrics dashboard) are read from the back of a classroom: the charts take the notebook's full
width, the font is large, time runs along every x axis in seconds from 0, and the status line
starts with the panel's short title in bold. What each panel draws stays in its own module.
"""

from __future__ import annotations

from copy import deepcopy
from html import escape

import plotly.graph_objects as go

FONT_SIZE = 15
MIN_X_SPAN_S = 1.0  # a run that has just started still shows a readable time axis
CONFIG = {"responsive": True, "displaylogo": False}


def figure_widget(fig: go.Figure) -> go.FigureWidget:
    """A ``FigureWidget`` of ``fig`` that follows the notebook's width, without the plotly logo."""
    widget = go.FigureWidget(fig)
    widget._config = dict(CONFIG)
    return widget


def keep_for_reload(widget: go.FigureWidget) -> None:
    """Make the widget's saved state the figure as drawn now, so that a page reload redraws it whole.

    A ``FigureWidget`` sends each draw to the browser as a delta (restyle, relayout); the state a
    reloaded page builds a new view from (``_widget_data``, ``_widget_layout``) is the figure as it
    was when the widget was made: empty axes, the first ranges. Setting both after a draw keeps
    that state current: plotly's browser side ignores their changes in a live view (its
    ``do_data``/``do_layout`` are no-ops), and a view built after a reload starts from them.
    """
    widget._widget_data = deepcopy(widget._data)
    widget._widget_layout = deepcopy(widget._layout_obj._props)


def style_layout(fig: go.Figure, *, height_px: int, margin: dict[str, int], legend: dict[str, object]) -> None:
    """The frame both panels use: full width, large font, white template, time in seconds from 0."""
    fig.update_layout(
        autosize=True,
        height=height_px,
        font={"size": FONT_SIZE},
        margin=margin,
        template="plotly_white",
        legend=legend,
    )
    fig.update_xaxes(title_text="время, с", range=[0, MIN_X_SPAN_S])


def status_html(title: str, text: str, *, font_px: int) -> str:
    """The status line: the panel's title in bold, then what it is doing (both HTML-escaped)."""
    return f'<div style="font-size:{font_px}px; line-height:1.4"><b>{escape(title)}</b> — {escape(text)}</div>'
