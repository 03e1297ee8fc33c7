"""The business store's circuit breaker: an outage of the ledger is a pause, not a verdict on the events.

A charge fails because of the store (locked past the busy timeout, disk full, I/O error,
read-only, a broken connection: :class:`~solutions.sqlite_errors.LedgerUnavailable`), not
because of the event. Retrying the events would only spend their delivery attempts on a fault
that is not theirs, and after ``max_attempts`` dead-letter good events as if they were bad
input. So the worker stops instead:

- **down**: the first failed charge opens the breaker (:meth:`StoreBreaker.failed`). The
  pipeline gives the failed messages back (left pending, not counted as an attempt), the
  reader stops reading new entries and the rescuer stops reclaiming
  (:meth:`StoreBreaker.wait_up`), and charges still on their way fail at once instead of
  waiting for the store (:meth:`StoreBreaker.refuse`);
- **probing**: a task of the breaker's own tries a small write (``probe``) with a jittered
  exponential backoff, from 50 ms up to one second, so that charging resumes within about a
  second of the store's return (a store that comes back and fails again within
  :data:`STABLE_S` keeps the longer delay, so a flapping store is probed about once a second);
- **on trial** (half-open): the first probe that commits lets charging go again: the reader
  re-reads its own pending entries first, so the messages that waited are charged at once.
  A disk that is almost full takes a probe's one small row and still refuses a batch of
  charges: if a charge fails on the store again now, this is the same outage going on (no
  new ``down`` line, not a second outage), and probing goes on;
- **up**: the first charge that commits on trial, or :data:`TRIAL_S` with nothing failing,
  closes the breaker.

Logs: one line when the store goes down (with the cause), one when it is back (with the
outage's length and how many messages waited), and while it is down a summary every
``summary_every_s``; never a line per message. Metrics: ``store_up`` (1 or 0) and
``store_outages`` (see :mod:`solutions.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from solutions.cancelling import cancel_and_wait
from solutions.connection import REDIS_ERRORS, Backoff, describe
from solutions.metrics import Metrics
from solutions.sqlite_errors import LedgerUnavailable

log = logging.getLogger(__name__)

PROBE_BASE_S = 0.05
PROBE_CAP_S = 1.0
SUMMARY_EVERY_S = 30.0
STABLE_S = 10.0  # up this long, and the next outage's probes start from the shortest delay again
PROBER_STOP_TIMEOUT_S = 5.0  # the prober at shutdown (solutions.cancelling)
TRIAL_S = 2.0  # on trial this long with nothing failing (nothing to charge, say), and the store is back

Probe = Callable[[], Awaitable[None]]
Backlog = Callable[[], Awaitable[str]]


class StoreBreaker:
    """Up or down, for one worker's business store; the probe task runs only while it is down."""

    def __init__(
        self,
        probe: Probe,
        metrics: Metrics,
        *,
        backlog: Backlog | None = None,
        summary_every_s: float = SUMMARY_EVERY_S,
        backoff: Backoff | None = None,
        trial_s: float = TRIAL_S,
    ) -> None:
        self.probe = probe
        self.metrics = metrics
        self.backlog = backlog  # what waits in Redis, for the "back" line (one query)
        self.summary_every_s = summary_every_s
        self.trial_s = trial_s
        self.backoff = backoff or Backoff(base_s=PROBE_BASE_S, cap_s=PROBE_CAP_S)
        self.up = True
        self.cause: LedgerUnavailable | None = None
        self.down_since = 0.0
        self.up_since = 0.0
        self.waiting = 0  # messages whose charge failed in this outage (left pending)
        self.probes = 0
        self.trials_failed = 0  # in this outage: probes that committed, then a charge failed again
        self._trial: asyncio.Future[bool] | None = None  # while on trial: True once a charge commits
        self._up_event: asyncio.Event | None = None
        self._prober: asyncio.Task[None] | None = None
        metrics.set("store_up", 1)

    def _event(self) -> asyncio.Event:
        if self._up_event is None:  # created inside the running loop, on first use
            self._up_event = asyncio.Event()
            if self.up:
                self._up_event.set()
        return self._up_event

    def failed(self, exc: LedgerUnavailable, messages: int) -> None:
        """A charge of ``messages`` failed on the store: open the breaker (once per outage)."""
        self.cause = exc
        if self._trial is not None and not self._trial.done():  # on trial: the same outage goes on
            self._trial.set_result(False)  # and so does probing (the messages were counted before)
            self._pause()
            return
        self.waiting += messages
        if not self.up:
            return
        self.up = False
        self.down_since = time.monotonic()
        if self.down_since - self.up_since >= STABLE_S:  # a store that flaps probes less and less often
            self.backoff.reset()
        self.probes = self.trials_failed = 0
        self.metrics.inc("store_outages")
        self._pause()
        log.warning(
            "business store down (%s); stopped reading and reclaiming, probing it with backoff "
            "(%s left pending, not counted as attempts)", exc, _messages(messages),
        )
        self._prober = asyncio.create_task(self._probe_until_up(), name="store-probe")

    def _pause(self) -> None:
        self.up = False
        self.metrics.set("store_up", 0)
        self._event().clear()

    def committed(self) -> None:
        """A charge committed: on trial, the store is back (once a flush, not once a message)."""
        if self._trial is not None and not self._trial.done():
            self._trial.set_result(True)

    def refuse(self) -> None:
        """Raise :class:`LedgerUnavailable` at once while the store is down (a charge on its way)."""
        if not self.up and self.cause is not None:
            raise LedgerUnavailable(self.cause.fault, self.cause.cause, reopened=False)

    async def wait_up(self, stop: asyncio.Event) -> None:
        """Return when the store is up (at once if it is), or when ``stop`` is set."""
        if self.up:
            return
        up, stopped = asyncio.ensure_future(self._event().wait()), asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([up, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.cancel()
            stopped.cancel()

    async def aclose(self) -> None:
        """Stop probing (at shutdown)."""
        if self._prober is not None:
            await cancel_and_wait([self._prober], PROBER_STOP_TIMEOUT_S)

    async def _probe_until_up(self) -> None:
        summary_at = time.monotonic()
        while True:
            await asyncio.sleep(self.backoff.next_delay_s())
            self.probes += 1
            try:
                await self.probe()
            except LedgerUnavailable as exc:
                self.cause = exc
            except Exception as exc:  # a bug in the probe: still down, and said so in the summary
                log.error("store probe raised %s", describe(exc), exc_info=exc)
            else:
                answered_at = time.monotonic()
                if await self._on_trial():
                    await self._back(answered_at - self.down_since)
                    return
                self.trials_failed += 1
            if time.monotonic() - summary_at >= self.summary_every_s:
                summary_at = time.monotonic()
                log.warning(
                    "business store still down after %.1fs (%s probes; %s left pending): %s",
                    summary_at - self.down_since, self.probes, _messages(self.waiting), self.cause,
                )

    async def _on_trial(self) -> bool:
        """Half-open: charging goes again. True when a charge commits, or :attr:`trial_s` passes
        with nothing failing; False when a charge fails on the store again (:meth:`failed`)."""
        self._trial = trial = asyncio.get_running_loop().create_future()
        self.up = True
        self.metrics.set("store_up", 1)
        self._event().set()
        try:
            await asyncio.wait([trial], timeout=self.trial_s)
        finally:
            self._trial = None
        return trial.result() if trial.done() else True

    async def _back(self, outage_s: float) -> None:
        backlog = ""
        if self.backlog is not None:
            with contextlib.suppress(*REDIS_ERRORS):  # only for the log line; Redis may be away too
                backlog = "; " + await self.backlog()
        self.up_since = time.monotonic()
        relapses = f", {self.trials_failed} times a probe and then a charge failed" if self.trials_failed else ""
        log.warning(
            "business store back after %.1fs (%s probes%s, last cause: %s); %s had been left "
            "pending%s", outage_s, self.probes, relapses, self.cause, _messages(self.waiting), backlog,
        )
        self.waiting = 0


def _messages(n: int) -> str:
    return f"{n} message" if n == 1 else f"{n} messages"
