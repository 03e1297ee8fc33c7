"""A live chart of charges per second, one line per shard, read from the worker's SQLite ledger.

>>> panel = ShardChargesPanel(ledger, shard_names, max_duration_s=30).start()
>>> display(panel.widget)
>>> panel.mark("kill -9")          # a vertical line at this moment
>>> panel.stop(); panel.samples[-1].charged

Notebook 09 kills the master of one shard under load: only that shard's line drops to zero,
for about the promotion time, while the others go on. The panel reads the ledger, not Redis
and not the worker's own counters: each new row of ``charges`` is given to the shard its
``order_id`` routes to (``shard_of(order_id, N)``, the producer's rule), so what it draws is
the business effect itself, and a dead master cannot blind the chart.

Like the other panels (:mod:`labs.panels.monitor`): a daemon thread with a stop event, each
refresh one bounded query (``SELECT ... WHERE id > last LIMIT``, a busy timeout of a second),
widget values only, never a print; it stops on :meth:`stop`, on leaving ``with``, or by itself
after ``max_duration_s``. A ledger that does not exist yet (the worker has not started) reads as
no charges.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import ipywidgets as widgets

from labs.panels.figure import PALETTE, short_key
from labs.panels.monitor import MonitorThread
from labs.panels.style import FONT_SIZE, MIN_X_SPAN_S, figure_widget, keep_for_reload, status_html, style_layout
from solutions.shards import shard_of

if TYPE_CHECKING:
    import plotly.graph_objects as go

log = logging.getLogger(__name__)

ROWS_PER_REFRESH = 50_000
HEIGHT_PX = 380
MARK_COLOUR = "#C0392B"


@dataclass(frozen=True)
class ShardSample:
    """One refresh: seconds since start, charges so far per shard, charges per second per shard."""

    t_s: float
    charged: tuple[int, ...]
    per_s: tuple[float, ...]


class ShardChargesPanel(MonitorThread[ShardSample]):
    """Charges per second of each shard of a stream, live, from the ledger at ``ledger``."""

    max_backoff_s = 2.0
    join_timeout_s = 5.0

    def __init__(
        self, ledger: Path, shards: Sequence[str], *, refresh_s: float = 0.2, window_s: float = 0.6,
        max_duration_s: float = 60.0, title: str = "списания по шардам",
    ) -> None:
        super().__init__(refresh_s=refresh_s, max_duration_s=max_duration_s)
        if not shards or window_s <= 0:
            raise ValueError("need at least one shard and a positive window")
        self.ledger = Path(ledger)
        self.shards = list(shards)
        self.window_s = window_s
        self.title = title
        self.marks: list[tuple[float, str]] = []
        self._marks_lock = threading.Lock()
        self._started = time.monotonic()
        self._db: sqlite3.Connection | None = None
        self._last_id = 0
        self._counts = [0] * len(self.shards)
        self.figure = figure_widget(self._layout())
        self.label = widgets.HTML(value=status_html(title, "ещё не запущена", font_px=FONT_SIZE + 1))
        self.widget = widgets.VBox([self.label, self.figure], layout=widgets.Layout(width="100%"))
        self.widget.add_class("shard-charges")  # for the browser check and a stylesheet
        self.label.add_class("shard-charges-status")

    def mark(self, label: str) -> float:
        """Draw a vertical line now, labelled (a fault); returns its time in seconds since start."""
        t_s = round(time.monotonic() - self._started, 3)
        with self._marks_lock:
            self.marks.append((t_s, label))
        return t_s

    # -- the figure -----------------------------------------------------------------

    def _layout(self) -> go.Figure:
        import plotly.graph_objects as go

        fig = go.Figure()
        for index, name in enumerate(self.shards):
            fig.add_scatter(x=[], y=[], mode="lines", name=short_key(name), line={"width": 3,
                            "color": PALETTE[index % len(PALETTE)]})
        style_layout(fig, height_px=HEIGHT_PX, margin={"t": 30, "b": 55, "l": 70, "r": 15},
                     legend={"x": 1.01, "y": 1.0, "xanchor": "left", "yanchor": "top", "title": {"text": "шард"}})
        fig.update_yaxes(title_text="списаний в секунду", rangemode="tozero", range=[0, 10])
        return fig

    def _draw(self, history: list[ShardSample]) -> None:
        xs = [s.t_s for s in history]
        top = max((v for s in history for v in s.per_s), default=0.0)
        with self._marks_lock:
            marks = list(self.marks)
        shapes = [{"type": "line", "x0": t, "x1": t, "yref": "paper", "y0": 0, "y1": 1,
                   "line": {"color": MARK_COLOUR, "dash": "dash", "width": 2}} for t, _ in marks]
        notes = [{"x": t, "y": 1.0, "yref": "paper", "text": label, "showarrow": False, "xanchor": "left",
                  "yanchor": "top", "font": {"color": MARK_COLOUR, "size": FONT_SIZE}} for t, label in marks]
        with self.figure.batch_update():
            for index, trace in enumerate(self.figure.data):
                trace.x, trace.y = xs, [s.per_s[index] for s in history]
            self.figure.layout.shapes = shapes
            self.figure.layout.annotations = notes
            self.figure.layout.xaxis.range = [0, max(MIN_X_SPAN_S, xs[-1] if xs else 0.0)]
            self.figure.layout.yaxis.range = [0, max(10.0, top * 1.15)]
        keep_for_reload(self.figure)

    def _show(self, text: str) -> None:
        with contextlib.suppress(Exception):  # a closed comm must not kill the thread
            self.label.value = status_html(self.title, text, font_px=FONT_SIZE + 1)

    # -- the hooks of the thread ----------------------------------------------------

    def _reset(self) -> None:
        self._started = time.monotonic()
        self._last_id = 0
        self._counts = [0] * len(self.shards)
        with self._marks_lock:
            self.marks = []

    def _thread_name(self) -> str:
        return f"shard-charges-{self.ledger.name}"

    def _read_new(self) -> list[str]:
        """The order ids of the rows added since the last refresh (none while there is no ledger yet)."""
        if self._db is None:
            if not self.ledger.exists():
                return []
            self._db = sqlite3.connect(f"file:{self.ledger}?mode=ro", uri=True, timeout=1.0,
                                       check_same_thread=False)
        try:
            rows = self._db.execute("SELECT id, order_id FROM charges WHERE id > ? ORDER BY id LIMIT ?",
                                    (self._last_id, ROWS_PER_REFRESH)).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        if rows:
            self._last_id = int(rows[-1][0])
        return [str(order_id) for _, order_id in rows]

    def _sample(self, elapsed_s: float) -> bool:
        try:
            new = self._read_new()
        except sqlite3.Error as exc:
            self._show(f"ошибка чтения леджера ({exc}), пробую снова")
            return False
        n = len(self.shards)
        for order_id in new:
            self._counts[shard_of(order_id, n)] += 1
        history = self.samples
        back = next((s for s in reversed(history) if s.t_s <= elapsed_s - self.window_s), None)
        base, span = (back.charged, elapsed_s - back.t_s) if back else ((0,) * n, max(elapsed_s, self.refresh_s))
        per_s = tuple(round((now - then) / span, 1) for now, then in zip(self._counts, base, strict=True))
        sample = ShardSample(round(elapsed_s, 3), tuple(self._counts), per_s)
        history = self._append(sample)
        try:
            self._draw(history)
        except Exception as exc:  # a widget error must not kill the thread
            log.debug("shard chart: drawing failed: %s", exc)
        self._show(f"{elapsed_s:.0f} с · списано " + " · ".join(f"{short_key(s)} {c}"
                                                              for s, c in zip(self.shards, self._counts, strict=True)))
        return True

    def _finish(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        reason = self._max_duration_words() or "работа закончилась"
        self._show(f"остановлена: {reason} · списано {sum(self._counts)}")
