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
import threading
import time
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labs.panels.dashboard_figure import DashboardFigure
from labs.panels.dashboard_sample import DashboardSample, rate, settled_for, verdict_of
from labs.panels.scrape import SCRAPE_TIMEOUT_S, WorkerNumbers, scrape
from labs.panels.streams_info import StreamStats, read_stream_stats

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 1.0
MAX_BACKOFF_S = 3.0
MAX_SAMPLES = 5000
JOIN_TIMEOUT_S = SCRAPE_TIMEOUT_S + 2 * REDIS_TIMEOUT_S + MAX_BACKOFF_S


class MetricsDashboard:
    """Live charts of one worker's metrics endpoint (and, optionally, its stream in Redis)."""

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
        if refresh_s <= 0 or max_duration_s <= 0:
            raise ValueError("refresh_s and max_duration_s must be positive")
        self.metrics_url = metrics_url
        self.redis_url = redis_url
        self.stream = stream
        self.group = group
        self.refresh_s = refresh_s
        self.max_duration_s = max_duration_s
        self.idle_stop_s = idle_stop_s
        self.problems = 0
        self.stop_reason: str | None = None
        self._samples: list[DashboardSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.figure = DashboardFigure(title)

    # -- public API -----------------------------------------------------------------

    @property
    def widget(self) -> Any:
        """The ipywidgets container to ``display()``: status line above four charts."""
        return self.figure.widget

    @property
    def samples(self) -> list[DashboardSample]:
        """A copy of the samples taken since the last :meth:`start`."""
        with self._lock:
            return list(self._samples)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> MetricsDashboard:
        """Start refreshing from a daemon thread (a no-op while running); returns self."""
        if self.running:
            return self
        self._stop.clear()
        self.stop_reason = None
        self.problems = 0
        with self._lock:
            self._samples = []
        self.figure.show_status("запускается")
        self._thread = threading.Thread(target=self._run, name="metrics-dashboard", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after one last sample, redraw the whole history, wait for the thread (idempotent)."""
        if self.stop_reason is None and self.running:
            self.stop_reason = "stop()"
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)

    def wait_stopped(self, timeout_s: float = 10.0) -> bool:
        """Wait until the thread has ended (by itself or by :meth:`stop`); True if it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        return not self.running

    def wait_for(self, predicate: Any, timeout_s: float = 10.0) -> bool:
        """Wait until ``predicate(samples)`` is true (or the dashboard stops); its last value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.samples):
                return True
            if not self.running:
                break
            time.sleep(min(0.05, self.refresh_s))
        return bool(predicate(self.samples))

    def __enter__(self) -> MetricsDashboard:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the thread -----------------------------------------------------------------

    def _client(self) -> redis.Redis | None:
        if self.redis_url is None:
            return None
        return redis.Redis.from_url(
            self.redis_url,
            decode_responses=True,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            client_name="metrics-dashboard",
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
                if self.idle_stop_s is not None and settled_for(self.samples, self.idle_stop_s):
                    self.stop_reason = f"idle_stop_s={self.idle_stop_s:g}"
                    break
                pause_s = self.refresh_s if failures == 0 else min(MAX_BACKOFF_S, self.refresh_s * 2**failures)
                self._stop.wait(min(pause_s, max(0.0, self.max_duration_s - elapsed_s)))
            if self.stop_reason == "stop()":
                self._refresh(client, time.monotonic() - started)  # the state at stop(), not a moment before
        finally:
            if client is not None:
                client.close()
            self._safely(lambda: self.figure.draw(self.samples, all_points=True))
            final = f"остановлен: {self._stop_words()} · {self._words()}"
            self._safely(lambda: self.figure.show_status(final))

    def _refresh(self, client: redis.Redis | None, elapsed_s: float) -> bool:
        """Take one sample and draw it; False when the endpoint or Redis did not answer."""
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

    def _safely(self, action: Any) -> None:
        """Run a widget update; a closed comm or widget error must not kill the thread."""
        try:
            action()
        except Exception as exc:
            log.debug("dashboard: widget update failed: %s", exc)

    def _stop_words(self) -> str:
        if self.stop_reason is not None and self.stop_reason.startswith("idle_stop_s"):
            return f"воркер {self.idle_stop_s:g} с без работы — прогон закончен"
        if self.stop_reason is not None and self.stop_reason.startswith("max_duration_s"):
            return f"прошло {self.max_duration_s:g} с (max_duration_s)"
        return "вызван stop()"

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
    return "-" if value is None else f"{value:.0f}"
