"""A live panel for a stream and one consumer group: XPENDING per consumer, lag, oldest pending age.

>>> panel = StreamPanel(url, stream="orders", group="billing", max_duration_s=30).start()
>>> display(panel.widget)          # in a notebook: updates live while cells run
>>> panel.samples[-1].pending_by_consumer
>>> panel.stop()

The panel samples Redis from a daemon thread (see :mod:`labs.panels.streams_info`): a thread keeps
refreshing while the kernel runs other cells back to back, where an asyncio task would
starve. The thread only sets widget values and never prints (a print from a thread lands
in whichever cell happens to be running). It stops on :meth:`stop`, on leaving a ``with``
block, or by itself after ``max_duration_s``. A Redis error does not kill it: the label
shows the error and the thread backs off, then tries again.

A short run (Run All finishes a demo in seconds, sometimes before the browser has even
drawn the widget) can be watched again: :meth:`replay` (or the panel's "повторить"
button) redraws the recorded samples at their own pace.

Without a frontend (nbval, a script) the widgets still exist as objects; the panel
works the same and ``samples`` carries the figures for asserts.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import redis

from labs.panels.figure import PanelFigure, short_key
from labs.panels.monitor import MonitorThread
from labs.panels.sample import PanelSample
from labs.panels.streams_info import read_stream_stats, snapshot_client

if TYPE_CHECKING:
    import ipywidgets as widgets

log = logging.getLogger(__name__)

SOCKET_TIMEOUT_S = 1.0
MAX_BACKOFF_S = 5.0
JOIN_TIMEOUT_S = 2 * SOCKET_TIMEOUT_S + MAX_BACKOFF_S
MAX_REPLAY_S = 15.0  # a longer history is replayed faster, so that a replay fits in this
STOP_WORDS = {"stop()": "работа закончилась"}


def describe(sample: PanelSample) -> str:
    """One sample's figures: ``XLEN 120 · в PEL 7 · lag 3``."""
    lag = "—" if sample.lag is None else str(sample.lag)  # Redis cannot tell (or no group yet)
    return f"XLEN {sample.length} · в PEL {sample.pending} · lag {lag}"


class StreamPanel(MonitorThread[PanelSample]):
    """Live XPENDING per consumer, group lag and the oldest pending entry's age of ``stream``/``group``.

    The title defaults to the stream's name without a random prefix and the group's name
    (``orders · группа billing``); the status line says in words what the panel is doing.
    The thread's machinery (start, stop, waits, backoff) is :class:`~labs.panels.monitor.MonitorThread`.
    """

    max_backoff_s = MAX_BACKOFF_S
    join_timeout_s = JOIN_TIMEOUT_S

    def __init__(
        self,
        redis_url: str,
        stream: str = "orders",
        group: str = "billing",
        *,
        refresh_s: float = 0.5,
        max_duration_s: float = 60.0,
        title: str | None = None,
    ) -> None:
        super().__init__(refresh_s=refresh_s, max_duration_s=max_duration_s)
        self.redis_url = redis_url
        self.stream = stream
        self.group = group
        self.errors = 0
        self._redis: redis.Redis | None = None
        self._replay_stop = threading.Event()
        self._replay_thread: threading.Thread | None = None
        self._figure = PanelFigure(title or f"{short_key(stream)} · группа {group}")
        self._figure.on_replay(self.replay)

    @property
    def widget(self) -> widgets.VBox:
        """The ipywidgets container: the plotly FigureWidget and a status label."""
        return self._figure.widget

    # -- the hooks of the thread ----------------------------------------------------

    def _thread_name(self) -> str:
        return f"panel-{self.stream}"

    def _reset(self) -> None:
        self._stop_replay()
        self._figure.replay_button.disabled = True
        self.errors = 0
        self._figure.reset()

    def _open(self) -> None:
        self._redis = snapshot_client(self.redis_url, timeout_s=SOCKET_TIMEOUT_S, client_name="stream-panel")

    def _stop_words(self) -> str:
        """Why the panel stopped, in words (``stop_reason`` keeps the short code)."""
        reason = self.stop_reason
        return self._max_duration_words() or STOP_WORDS.get(reason or "stop()", reason or "")

    def _finish(self) -> None:
        if self._redis is not None:
            self._redis.close()
        self._show(f"остановлена: {self._stop_words()} · {self._summary()}")
        self._figure.replay_button.disabled = not self.samples

    def _sample(self, elapsed_s: float) -> bool:
        """Take one sample and draw it; on a Redis error show it and return False."""
        client = self._redis  # opened by _open() before the first sample
        if client is None:
            return False
        try:
            stats = read_stream_stats(client, self.stream, self.group)
        except Exception as exc:  # a monitor must outlive any error; the label shows it
            self.errors += 1
            log.debug("panel %s: %s", self.stream, exc)
            self._show(f"ошибка Redis ({type(exc).__name__}: {exc}), пробую снова · {self._summary()}")
            return False
        sample = PanelSample(
            t_s=round(elapsed_s, 3),
            length=stats.length,
            pending_by_consumer=stats.pending_by_consumer,
            lag=stats.lag,
            stream_age_ms=stats.stream_age_ms,
            oldest_pending_age_ms=stats.oldest_pending_age_ms,
        )
        history = self._append(sample)
        try:
            self._figure.draw(history)
        except Exception as exc:  # a closed comm or a widget error must not kill the thread
            log.debug("panel %s: drawing failed: %s", self.stream, exc)
        self._show(f"идёт: {self._summary()}")
        return True

    def _show(self, text: str) -> None:
        """Set the label; never raises (and never prints: this runs in the panel's thread)."""
        try:
            self._figure.show_status(text)
        except Exception as exc:
            log.debug("panel %s: label update failed: %s", self.stream, exc)

    def _summary(self) -> str:
        samples = self.samples
        text = f"{samples[-1].t_s:.0f} с · {describe(samples[-1])}" if samples else "замеров ещё нет"
        return text + (f" · ошибок Redis {self.errors}" if self.errors else "")

    # -- replay ---------------------------------------------------------------------

    def replay(self, speed: float | None = None) -> StreamPanel:
        """Redraw the recorded samples at their own pace, from a daemon thread; returns self.

        ``speed`` 1 is real time; by default a history longer than ``MAX_REPLAY_S`` is played
        faster so that it takes that long. A no-op while the panel is live or has no samples.
        """
        history = self.samples
        if self.running or not history:
            return self
        self._stop_replay()
        total_s = history[-1].t_s
        chosen = speed if speed is not None else max(1.0, total_s / MAX_REPLAY_S)
        if chosen <= 0:
            raise ValueError("speed must be positive")
        self._replay_stop.clear()
        self._replay_thread = threading.Thread(
            target=self._replay, args=(history, chosen), name=f"panel-replay-{self.stream}", daemon=True
        )
        self._replay_thread.start()
        return self

    @property
    def replaying(self) -> bool:
        return self._replay_thread is not None and self._replay_thread.is_alive()

    def _stop_replay(self) -> None:
        self._replay_stop.set()
        thread = self._replay_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)

    def _replay(self, history: list[PanelSample], speed: float) -> None:
        started = time.monotonic()
        total_s = history[-1].t_s
        for index, sample in enumerate(history):
            wait_s = (sample.t_s - history[0].t_s) / speed - (time.monotonic() - started)
            if wait_s > 0 and self._replay_stop.wait(wait_s):
                return
            try:
                self._figure.draw(history[: index + 1])
            except Exception as exc:  # a closed comm must not kill the thread
                log.debug("panel %s: replay drawing failed: %s", self.stream, exc)
            pace = "" if speed == 1 else f" ×{speed:.1f}"
            self._show(f"повтор{pace}: {sample.t_s:.0f} из {total_s:.0f} с · {describe(sample)}")
        self._show(f"повтор окончен: {total_s:.0f} с · {describe(history[-1])}")
