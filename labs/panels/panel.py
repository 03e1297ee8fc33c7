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
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labs.panels.figure import PanelFigure, short_key
from labs.panels.sample import PanelSample
from labs.panels.streams_info import read_stream_stats

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


def stop_words(reason: str | None, max_duration_s: float) -> str:
    """Why the panel stopped, in words (``stop_reason`` keeps the short code)."""
    if reason is not None and reason.startswith("max_duration_s"):
        return f"прошло {max_duration_s:g} с (max_duration_s)"
    return STOP_WORDS.get(reason or "stop()", reason or "")


class StreamPanel:
    """Live XPENDING per consumer, group lag and the oldest pending entry's age of ``stream``/``group``.

    The title defaults to the stream's name without a random prefix and the group's name
    (``orders · группа billing``); the status line says in words what the panel is doing.
    """

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
        if refresh_s <= 0 or max_duration_s <= 0:
            raise ValueError("refresh_s and max_duration_s must be positive")
        self.redis_url = redis_url
        self.stream = stream
        self.group = group
        self.refresh_s = refresh_s
        self.max_duration_s = max_duration_s
        self.errors = 0
        self.stop_reason: str | None = None
        self._samples: list[PanelSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._replay_stop = threading.Event()
        self._replay_thread: threading.Thread | None = None
        self._figure = PanelFigure(title or f"{short_key(stream)} · группа {group}")
        self._figure.on_replay(self.replay)

    # -- public API -----------------------------------------------------------------

    @property
    def widget(self) -> Any:
        """The ipywidgets container: the plotly FigureWidget and a status label."""
        return self._figure.widget

    @property
    def samples(self) -> list[PanelSample]:
        """A copy of the samples taken since the last :meth:`start`."""
        with self._lock:
            return list(self._samples)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> StreamPanel:
        """Start refreshing from a daemon thread (a no-op while running); returns self."""
        if self.running:
            return self
        self._stop_replay()
        self._figure.replay_button.disabled = True
        self._stop.clear()
        self.stop_reason = None
        self.errors = 0
        with self._lock:
            self._samples = []
        self._figure.reset()
        self._thread = threading.Thread(target=self._run, name=f"panel-{self.stream}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread after one last sample and wait for it (idempotent)."""
        if self.stop_reason is None and self.running:
            self.stop_reason = "stop()"
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)

    def wait_for_samples(self, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until at least ``count`` samples exist (or the panel stops); True if reached."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.samples) >= count:
                return True
            if not self.running:
                break
            time.sleep(min(0.05, self.refresh_s))
        return len(self.samples) >= count

    def __enter__(self) -> StreamPanel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the thread -----------------------------------------------------------------

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(
            self.redis_url,
            decode_responses=True,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            client_name="stream-panel",
        )

    def _run(self) -> None:
        started = time.monotonic()
        client = self._client()
        failures = 0
        try:
            while not self._stop.is_set():
                elapsed_s = time.monotonic() - started
                if elapsed_s >= self.max_duration_s:
                    self.stop_reason = f"max_duration_s={self.max_duration_s:g}"
                    break
                failures = 0 if self._refresh(client, elapsed_s) else failures + 1
                pause_s = self.refresh_s if failures == 0 else self._backoff_s(failures)
                self._stop.wait(min(pause_s, max(0.0, self.max_duration_s - elapsed_s)))
            if self.stop_reason == "stop()":
                # One last sample, so that the frozen panel shows the state at stop() rather
                # than one taken up to refresh_s earlier.
                self._refresh(client, time.monotonic() - started)
        finally:
            client.close()
            self._show(f"остановлена: {stop_words(self.stop_reason, self.max_duration_s)} · {self._summary()}")
            self._figure.replay_button.disabled = not self.samples

    def _backoff_s(self, failures: int) -> float:
        return float(min(MAX_BACKOFF_S, self.refresh_s * 2 ** min(failures, 10)))

    def _refresh(self, client: redis.Redis, elapsed_s: float) -> bool:
        """Take one sample and draw it; on a Redis error show it and return False."""
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
        with self._lock:
            self._samples.append(sample)
            history = list(self._samples)
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
