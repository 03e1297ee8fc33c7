"""A live metrics dashboard for a running worker: its Prometheus numbers beside Redis's own.

>>> board = MetricsDashboard("http://127.0.0.1:9105/metrics", redis_url=url, stream="orders",
...                          group="billing", max_duration_s=30)
>>> display(board.widget)
>>> with board:                 # or board.start() ... board.stop()
...     run_the_load()
>>> board.samples[-1].worker.processed

Every ``refresh_s`` a daemon thread scrapes the worker's endpoint (one HTTP GET with a short
timeout, :mod:`labs.panels.scrape`) and takes one snapshot of the stream and group from Redis
(short socket timeouts, no retries, :mod:`labs.panels.streams_info`), then redraws the
charts and the status line (:mod:`labs.panels.dashboard_figure`). A thread, not an asyncio
task, because a task only advances while the kernel is idle and starves while cells run back
to back. The thread sets widget values only and never prints. It stops on :meth:`stop`, on
leaving a ``with`` block, by itself after ``max_duration_s``, or (with ``idle_stop_s``) once
the worker has had nothing to do for that long after doing some work; on stopping it redraws its
whole history, so even a short run ends with every sample on screen. An unreachable endpoint
or Redis is shown in the status line and retried with a backoff; it never kills the thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from labs.panels.dashboard_figure import DashboardFigure
from labs.panels.dashboard_sample import DashboardSample, rate, settled_for, verdict_of
from labs.panels.monitor import MonitorThread
from labs.panels.scrape import SCRAPE_TIMEOUT_S, WorkerNumbers, scrape
from labs.panels.streams_info import StreamStats, read_stream_stats, snapshot_client

if TYPE_CHECKING:
    import ipywidgets as widgets

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 1.0
MAX_BACKOFF_S = 3.0
MAX_SAMPLES = 5000
JOIN_TIMEOUT_S = SCRAPE_TIMEOUT_S + 2 * REDIS_TIMEOUT_S + MAX_BACKOFF_S


class MetricsDashboard(MonitorThread[DashboardSample]):
    """Live charts of one worker's metrics endpoint (and, optionally, its stream in Redis).

    The thread's machinery (start, stop, waits, backoff) is :class:`~labs.panels.monitor.MonitorThread`.
    """

    max_backoff_s = MAX_BACKOFF_S
    join_timeout_s = JOIN_TIMEOUT_S

    def __init__(
        self,
        metrics_url: str,
        *,
        redis_url: str | None = None,
        stream: str = "orders",
        group: str = "billing",
        refresh_s: float = 0.5,
        max_duration_s: float = 60.0,
        idle_stop_s: float | None = None,
        title: str = "billing-worker: метрики",
    ) -> None:
        super().__init__(refresh_s=refresh_s, max_duration_s=max_duration_s)
        self.metrics_url = metrics_url
        self.redis_url = redis_url
        self.stream = stream
        self.group = group
        self.idle_stop_s = idle_stop_s
        self.problems = 0
        self._redis: redis.Redis | None = None
        self.figure = DashboardFigure(title)

    @property
    def widget(self) -> widgets.VBox:
        """The ipywidgets container to ``display()``: status line above four charts."""
        return self.figure.widget

    # -- the hooks of the thread ----------------------------------------------------

    def _thread_name(self) -> str:
        return "metrics-dashboard"

    def _reset(self) -> None:
        self.problems = 0
        self.figure.show_status("запускается")

    def _open(self) -> None:
        if self.redis_url is None:
            self._redis = None
            return
        self._redis = snapshot_client(self.redis_url, timeout_s=REDIS_TIMEOUT_S, client_name="metrics-dashboard")

    def _early_stop_reason(self) -> str | None:
        if self.idle_stop_s is not None and settled_for(self.samples, self.idle_stop_s):
            return f"idle_stop_s={self.idle_stop_s:g}"
        return None

    def _finish(self) -> None:
        """Close the client, redraw the whole history, say why it stopped."""
        if self._redis is not None:
            self._redis.close()
        self._safely(lambda: self.figure.draw(self.samples, all_points=True))
        final = f"остановлен: {self._stop_words()} · {self._words()}"
        self._safely(lambda: self.figure.show_status(final))

    def _sample(self, elapsed_s: float) -> bool:
        """Take one sample and draw it; False when the endpoint or Redis did not answer."""
        client = self._redis
        problems: list[str] = []
        worker = stats = None
        try:
            worker = scrape(self.metrics_url)
        except Exception as exc:  # a monitor outlives any error; the status line shows it
            problems.append(f"воркер не отвечает на /metrics ({type(exc.__cause__ or exc).__name__})")
        if client is not None:
            try:
                stats = read_stream_stats(client, self.stream, self.group)
            except Exception as exc:
                problems.append(f"Redis не отвечает ({type(exc).__name__})")
        self._add(elapsed_s, worker, stats, "; ".join(problems))
        self.problems += bool(problems)
        self._safely(lambda: self.figure.draw(self.samples))
        self._safely(lambda: self.figure.show_status(f"идёт: {self._words()}"))
        return not problems

    def _add(self, elapsed_s: float, worker: WorkerNumbers | None, stats: StreamStats | None, problem: str) -> None:
        with self._lock:
            before = next((s for s in reversed(self._samples) if s.worker is not None), None)
            dt_s = elapsed_s - before.t_s if before else 0.0
            old = before.worker if before else None
            sample = DashboardSample(
                t_s=round(elapsed_s, 3),
                worker=worker,
                redis=stats,
                processed_per_s=rate(worker, old, "processed", dt_s),
                errors_per_s=rate(worker, old, "errors", dt_s),
                processing_lag_s=worker.lag_since(old) if worker else None,
                problem=problem,
            )
            self._samples = [*self._samples[-(MAX_SAMPLES - 1):], sample]

    def _safely(self, action: Callable[[], object]) -> None:
        """Run a widget update; a closed comm or widget error must not kill the thread."""
        try:
            action()
        except Exception as exc:
            log.debug("dashboard: widget update failed: %s", exc)

    def _stop_words(self) -> str:
        if self.stop_reason is not None and self.stop_reason.startswith("idle_stop_s"):
            return f"воркер {self.idle_stop_s:g} с без работы — прогон закончен"
        return self._max_duration_words() or "вызван stop()"

    def _words(self) -> str:
        """The state in words for the status line: keeping up, falling behind, failing ..."""
        samples = self.samples
        if not samples:
            return "замеров ещё нет"
        last = samples[-1]
        if last.worker is None:
            return last.problem or "от воркера нет чисел"
        w = last.worker
        age = "-" if w.stream_age_s is None else f"{w.stream_age_s:.1f} с"
        lag_s = last.processing_lag_s if last.processing_lag_s is not None else w.lag_last_s
        lag = "-" if lag_s is None else f"{lag_s * 1000:.0f} мс"
        return (
            f"{verdict_of(samples)} · processed {_n(w.processed)} · errors {_n(w.errors)} · "
            f"reclaimed {_n(w.reclaimed)} · pending {_n(w.pending)} · lag {_n(w.group_lag)} · "
            f"processing lag {lag} · stream age {age} · t={last.t_s:.1f} с"
            + (f" · {last.problem}" if last.problem else "")
        )


def _n(value: float | None) -> str:
    """A count for the status line: ``-`` when not exported, ``?`` when the worker does not know it (NaN)."""
    if value is None:
        return "-"
    return "?" if math.isnan(value) else f"{value:.0f}"
