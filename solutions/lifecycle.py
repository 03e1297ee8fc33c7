"""Run until asked to stop, then drain: what the plain worker and the sharded worker share.

:meth:`Lifecycle.run` runs until :meth:`Lifecycle.request_stop` (or, with ``handle_signals=True``,
SIGINT/SIGTERM). Then it stops reading and claiming, lets the in-flight handlers of every
stream part finish within ``drain_timeout_s``, waits for the commits and XACKs on their way
(:meth:`~solutions.pipeline.Pipeline.settle`), never acks what was not done, gives up the
rescuer leases, logs one line with ``drain complete`` and the counts (and the ids left pending if
the deadline hit), and returns a :class:`Summary`. Signal handling is opt-in so that the same
worker runs as asyncio tasks inside a notebook.

A subclass says how to connect (:meth:`Lifecycle._open`), what to start
(:meth:`Lifecycle._start`), which stream parts it has (:meth:`Lifecycle.stream_parts`), how to
sample its gauges and how to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from solutions.cancelling import cancel_and_wait
from solutions.connection import REDIS_ERRORS, describe
from solutions.ledger import Ledger
from solutions.metrics import Metrics, Snapshot
from solutions.reader import ensure_group, own_pending
from solutions.settings import Settings
from solutions.store_breaker import StoreBreaker
from solutions.stream_part import StreamPart

log = logging.getLogger("solutions.worker")

SETTLE_MARGIN_S = 5.0  # at shutdown, a commit on its way gets the ledger's busy timeout plus this
LEFT_LISTED = 1000  # at most this many ids of what is left pending go into the drain line
LEFT_QUERY_TIMEOUT_S = 2.0
CANCEL_TIMEOUT_S = 5.0  # the readers, rescuers and watchers at the drain's start (solutions.cancelling)
# Before they are cancelled, the readers and rescuers get this long to end by themselves (each
# sees the stop at the top of its loop): an XREADGROUP or XAUTOCLAIM on its way when the stop
# came then has its batch dispatched and drained, instead of being cancelled after Redis had
# delivered it, which left the whole batch pending for another worker's min idle (about 1 stop
# in 75 under load, notebook 07). A BLOCK with nothing to read waits it out, then is cancelled.
# The handlers in hand go on meanwhile, so the grace is part of --drain-timeout-s, not added to it.
READ_GRACE_S = 0.1
CLOSE_MARGIN_S = 5.0  # closing the clients and the ledger (its last checkpoint), in drain_bound_s


@dataclass(frozen=True)
class Summary:
    """What a run did, returned by :meth:`Lifecycle.run`."""

    counts: Snapshot
    left_pending: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


class Lifecycle(ABC):
    """Start, run until asked to stop, drain every stream part, summarize."""

    def __init__(self, settings: Settings, ledger: Ledger | None = None) -> None:
        self.settings = settings
        self.ledger = ledger or Ledger(settings.ledger, busy_timeout_ms=settings.ledger_busy_timeout_ms)
        self.started = threading.Event()
        self.breaker: StoreBreaker | None = None
        self.summary: Summary | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False

    # -- what a worker says about itself ---------------------------------------------------

    @property
    @abstractmethod
    def counts(self) -> Snapshot:
        """The counters and gauges so far (over every part)."""

    @abstractmethod
    def stream_parts(self) -> list[StreamPart]:
        """The parts started so far."""

    @abstractmethod
    async def _open(self, stop: asyncio.Event) -> bool:
        """Connect; False when ``stop`` was set before there was anything to run."""

    @abstractmethod
    async def _start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Build and start the parts (and whatever runs beside them); their tasks."""

    @abstractmethod
    async def _close(self) -> None:
        """Close what :meth:`_open` opened (the ledger is closed after it, by :meth:`_finish`)."""

    @abstractmethod
    async def _refresh_gauges(self) -> None:
        """Sample every part's stream for its gauges (logs its own failures)."""

    def _metrics_line(self) -> str:
        return self.counts.line()

    # -- control ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the worker to drain and stop (safe from another thread or a signal handler)."""
        self._stop_requested = True
        if self._loop is None or self._stop is None or self._loop.is_closed():
            return  # run() has not started yet: it will see the flag and stop at once
        self._loop.call_soon_threadsafe(self._stop_now, self._stop)

    def _stop_now(self, stop: asyncio.Event) -> None:
        stop.set()
        for part in self.stream_parts():
            part.pool.wake()  # a reader or rescuer waiting for room sees the stop

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self._stop_requested:  # a second signal (or one sent to the process and its group): one line, no restart
            log.info("%s again (pid %s): already draining", name, os.getpid())
            return
        log.info("received %s (pid %s): stop reading and drain (up to %ss)", name, os.getpid(),
                 self.settings.drain_timeout_s)
        self.request_stop()

    # -- run -------------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = False) -> Summary:
        """Run until asked to stop, then drain; returns the summary (never raises on Redis errors)."""
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        if self._stop_requested:
            stop.set()
        if handle_signals:
            self._install_signals(self._loop)
        try:
            if not await self._open(stop):
                log.info("drain complete: asked to stop before Redis answered; nothing was read")
                self.summary = Summary(self.counts)
                await self._finish()
                return self.summary
            await asyncio.to_thread(self.ledger.open)
            tasks = await self._start(stop)
        except BaseException:
            await self._finish()
            raise
        self.started.set()
        try:
            await stop.wait()
        finally:
            self.summary = summary = await self._drain(tasks)
            await self._finish()
        return summary

    async def _finish(self) -> None:
        await self._close()
        await asyncio.to_thread(self.ledger.close)

    async def _start_part(self, part: StreamPart, stop: asyncio.Event, tag: str = "") -> list[asyncio.Task[None]]:
        """Create ``part``'s group if need be (its Redis may be down: the reader recovers later),
        and start its reader and, unless ``--no-rescuer``, its rescuer; their tasks."""
        with contextlib.suppress(*REDIS_ERRORS):
            await ensure_group(part.client, part.name, part.settings.group)
        tasks = [asyncio.create_task(part.reader.run(stop), name=f"reader{tag}")]
        if self.settings.rescuer:
            tasks.append(asyncio.create_task(part.rescuer.run(stop), name=f"rescuer{tag}"))
        return tasks

    def _new_breaker(self, metrics: Metrics, backlog: Callable[[], Awaitable[str]]) -> StoreBreaker:
        self.breaker = StoreBreaker(self._probe_ledger, metrics, backlog=backlog)
        return self.breaker

    async def _probe_ledger(self) -> None:
        await asyncio.to_thread(self.ledger.probe)

    async def _drain(self, tasks: list[asyncio.Task[None]]) -> Summary:
        started = time.monotonic()
        if tasks:
            await asyncio.wait(tasks, timeout=READ_GRACE_S)
        await cancel_and_wait(tasks, CANCEL_TIMEOUT_S)
        if self.breaker is not None:
            await self.breaker.aclose()
        parts = self.stream_parts()
        budget_s = max(0.0, self.settings.drain_timeout_s - (time.monotonic() - started))  # the grace counts
        in_hand = await asyncio.gather(*(part.pool.drain(budget_s) for part in parts))
        settle_s = self.ledger.busy_timeout_ms / 1000 + SETTLE_MARGIN_S
        settled = await asyncio.gather(*(part.pipeline.settle(settle_s) for part in parts))
        if not all(settled):
            log.warning("a commit or XACK was still on its way after %ss; its messages stay pending", settle_s)
        lefts = await asyncio.gather(*(left_in_pel(part, held) for part, held in zip(parts, in_hand, strict=True)))
        named = len(parts) > 1  # a shard's ids are not unique across shards
        left = [f"{part.name}/{i}" if named else i for part, ids in zip(parts, lefts, strict=True) for i in ids]
        await asyncio.gather(*(release_lease(part) for part in parts))
        counts = self.counts
        elapsed_s = time.monotonic() - started
        log.info(
            "drain complete in %.2fs%s: processed=%s acked=%s errors=%s dead_lettered=%s reclaimed=%s "
            "dedupe_skipped=%s left_pending=%s%s",
            elapsed_s,
            f" over {len(parts)} streams" if named else "",
            counts.processed,
            counts.acked,
            counts.errors,
            counts.dead_lettered,
            counts.reclaimed,
            counts.dedupe_skipped,
            len(left),
            (" ids=" + ",".join(left)) if left else "",
        )
        return Summary(counts, left, elapsed_s)

    async def _metrics_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.metrics_interval_s)
            if stop.is_set():
                return
            try:
                await self._refresh_gauges()
            except REDIS_ERRORS as exc:
                log.warning("metrics refresh failed: %s", describe(exc))
            except Exception as exc:  # a bug: said with its traceback; the worker goes on
                log.error("metrics refresh raised %s", describe(exc), exc_info=exc)
            log.info("metrics %s", self._metrics_line())


def drain_bound_s(settings: Settings) -> float:
    """The longest :meth:`Lifecycle.run` can take from the stop to its return, by its own timeouts:
    the runs in hand, a commit on its way, the PEL query and the lease, and a margin for closing."""
    settle_s = settings.ledger_busy_timeout_ms / 1000 + SETTLE_MARGIN_S
    return (READ_GRACE_S + CANCEL_TIMEOUT_S + settings.drain_timeout_s + settle_s + 2 * LEFT_QUERY_TIMEOUT_S
            + CLOSE_MARGIN_S)


async def release_lease(part: StreamPart) -> None:
    """Give ``part``'s rescuer lease up, so that another worker's rescuer may start at once.

    At most :data:`LEFT_QUERY_TIMEOUT_S`: the lease expires by itself, and on a shard whose
    master is dead a release would wait out the client's retries (every shard's at once, and
    one after another before).
    """
    with contextlib.suppress(*REDIS_ERRORS):  # TimeoutError is an OSError
        await asyncio.wait_for(part.rescuer.release_lease(), LEFT_QUERY_TIMEOUT_S)


async def left_in_pel(part: StreamPart, held: list[str]) -> list[str]:
    """What this consumer leaves pending on ``part``'s stream, as Redis has it (``XPENDING``).

    More than the pool still held: an ``XREADGROUP`` in flight when the stop came was
    cancelled after Redis had delivered its batch, so those entries sit in our PEL though the
    worker never saw them. If Redis cannot say, what the pool held is the best answer.
    """
    try:
        return await asyncio.wait_for(own_pending(part.client, part.settings, LEFT_LISTED), LEFT_QUERY_TIMEOUT_S)
    except REDIS_ERRORS as exc:  # TimeoutError is an OSError
        log.warning("could not read what is left in the PEL of %s (%s); listing what the worker held",
                    part.name, describe(exc))
        return held
