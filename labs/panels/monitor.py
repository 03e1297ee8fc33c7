"""The sampling thread both live panels share: start, stop, the loop, backoff, the waits.

A :class:`MonitorThread` takes one sample every ``refresh_s`` from a daemon thread (a thread,
not an asyncio task: a task only advances while the kernel is idle and starves while cells
run back to back). It stops on :meth:`~MonitorThread.stop` (after one last sample, so a frozen
panel shows the state at ``stop()``), on leaving a ``with`` block, by itself after
``max_duration_s``, or earlier when a subclass says so. A failed sample never kills the thread:
the pause grows (doubling up to ``max_backoff_s``) until a sample succeeds again.

A subclass fills in the hooks:

- :meth:`~MonitorThread._sample`: take one sample, record it, draw it; False if it failed
  (it must not raise);
- :meth:`~MonitorThread._early_stop_reason`: a reason to stop now, or None (default: never);
- :meth:`~MonitorThread._reset`: on :meth:`~MonitorThread.start`, before the thread runs;
- :meth:`~MonitorThread._open` / :meth:`~MonitorThread._finish`: in the thread, before the first
  sample and after the last one (open and close a client, draw the final status).

``stop_reason`` keeps why it stopped: ``"stop()"``, ``"max_duration_s=30"`` or the subclass's own.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Generic, Self, TypeVar

from labs.polling import every, poll

S = TypeVar("S")

STOP_CALLED = "stop()"
MAX_EXPONENT = 30  # 2**30 refreshes is far above any backoff cap, and keeps the float finite


class MonitorThread(ABC, Generic[S]):
    """A daemon thread that records samples of type ``S``; subclasses say how to take one."""

    max_backoff_s: float = 5.0
    join_timeout_s: float = 7.0  # how long stop() waits for the thread (a slow last sample)

    def __init__(self, *, refresh_s: float, max_duration_s: float) -> None:
        if refresh_s <= 0 or max_duration_s <= 0:
            raise ValueError("refresh_s and max_duration_s must be positive")
        self.refresh_s = refresh_s
        self.max_duration_s = max_duration_s
        self.stop_reason: str | None = None
        self._samples: list[S] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public API -----------------------------------------------------------------

    @property
    def samples(self) -> list[S]:
        """A copy of the samples taken since the last :meth:`start`."""
        with self._lock:
            return list(self._samples)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        """Start sampling from a daemon thread (a no-op while running); returns self."""
        if self.running:
            return self
        self._stop.clear()
        self.stop_reason = None
        with self._lock:
            self._samples = []
        self._reset()
        self._thread = threading.Thread(target=self._run, name=self._thread_name(), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread after one last sample and wait for it (idempotent)."""
        if self.stop_reason is None and self.running:
            self.stop_reason = STOP_CALLED
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.join_timeout_s)

    def wait_for(self, predicate: Callable[[list[S]], object], timeout_s: float = 10.0) -> bool:
        """Wait until ``predicate(samples)`` is true (or the thread stops); its last value."""
        poll(lambda: predicate(self.samples) or not self.running, timeout_s, min(0.05, self.refresh_s))
        return bool(predicate(self.samples))

    def wait_for_samples(self, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until at least ``count`` samples exist (or the thread stops); True if reached."""
        return self.wait_for(lambda samples: len(samples) >= count, timeout_s)

    def wait_stopped(self, timeout_s: float = 10.0) -> bool:
        """Wait until the thread has ended (by itself or by :meth:`stop`); True if it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        return not self.running

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the thread -----------------------------------------------------------------

    def _run(self) -> None:
        started = time.monotonic()
        self._open()
        failures = 0

        def pause_s() -> float:
            return self.refresh_s if failures == 0 else self._backoff_s(failures)

        try:
            for elapsed_s in every(pause_s, self.max_duration_s, self._stop):
                failures = 0 if self._sample(elapsed_s) else failures + 1
                early = self._early_stop_reason()
                if early is not None:
                    self.stop_reason = early
                    break
            else:
                if not self._stop.is_set():
                    self.stop_reason = f"max_duration_s={self.max_duration_s:g}"
            if self.stop_reason == STOP_CALLED:
                self._sample(time.monotonic() - started)  # the state at stop(), not a moment before
        finally:
            self._finish()

    def _max_duration_words(self) -> str | None:
        """``прошло 30 с (max_duration_s)`` when that is why it stopped, else None (for the status line)."""
        if self.stop_reason is not None and self.stop_reason.startswith("max_duration_s"):
            return f"прошло {self.max_duration_s:g} с (max_duration_s)"
        return None

    def _backoff_s(self, failures: int) -> float:
        """The pause after ``failures`` failed samples in a row: doubling, up to ``max_backoff_s``."""
        return float(min(self.max_backoff_s, self.refresh_s * 2 ** min(failures, MAX_EXPONENT)))

    def _append(self, sample: S) -> list[S]:
        """Record a sample; returns a copy of the history with it (for drawing)."""
        with self._lock:
            self._samples.append(sample)
            return list(self._samples)

    # -- hooks ----------------------------------------------------------------------

    @abstractmethod
    def _sample(self, elapsed_s: float) -> bool:
        """Take, record and draw one sample; False if it failed. Must not raise."""

    def _early_stop_reason(self) -> str | None:
        """Checked after every sample: a reason to stop now (it becomes ``stop_reason``), or None."""
        return None

    def _reset(self) -> None:
        """Called by :meth:`start` (samples and ``stop_reason`` are already cleared)."""

    def _open(self) -> None:
        """Called in the thread before the first sample."""

    def _finish(self) -> None:
        """Called in the thread after the last sample, whatever ended it. Must not raise."""

    def _thread_name(self) -> str:
        return type(self).__name__
