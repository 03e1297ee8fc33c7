"""The worker: a reader, a rescuer and the message pipeline around one Redis client.

``await Worker(settings).run()`` runs until :meth:`Worker.request_stop` (or, with
``handle_signals=True``, SIGINT/SIGTERM). Then it stops reading and claiming, lets the
in-flight handlers finish within ``drain_timeout_s``, waits for the commits and XACKs on
their way (:meth:`~solutions.pipeline.Pipeline.settle`), never acks what was not done, logs one
line with ``drain complete`` and the counts (and the ids left pending if the deadline hit),
and returns a :class:`Summary`. Signal handling is opt-in so that the same worker runs as
asyncio tasks inside a notebook.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from solutions.acks import Acks
from solutions.connection import REDIS_ERRORS, Client, connect, describe
from solutions.failover_watch import FailoverWatch
from solutions.handler import BillingHandler, Handler
from solutions.idempotency import Deps, make_strategy
from solutions.ledger import Ledger
from solutions.metrics import Metrics, Snapshot, group_numbers, stream_age_s
from solutions.pipeline import Pipeline, Rules
from solutions.pool import Pool
from solutions.reader import Reader, ensure_group
from solutions.rescuer import Rescuer
from solutions.settings import Settings
from solutions.store_breaker import StoreBreaker

log = logging.getLogger(__name__)

SETTLE_MARGIN_S = 5.0  # at shutdown, a commit on its way gets the ledger's busy timeout plus this


@dataclass(frozen=True)
class Summary:
    """What a run did, returned by :meth:`Worker.run`."""

    counts: Snapshot
    left_pending: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


class Worker:
    """One consumer of ``settings.group`` on ``settings.stream``."""

    def __init__(
        self,
        settings: Settings,
        *,
        handler: Handler | None = None,
        client: Client | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.settings = settings
        self.handler: Handler = handler or BillingHandler(
            stream=settings.stream,
            delay_ms=settings.handler_delay_ms,
            jitter_ms=settings.handler_jitter_ms,
            fail_every=settings.fail_every,
        )
        self.client = client
        self.metrics = Metrics(stream=settings.stream, group=settings.group, consumer=settings.consumer)
        self.pool = Pool(settings.parallelism)
        self.ledger = ledger or Ledger(settings.ledger, busy_timeout_ms=settings.ledger_busy_timeout_ms)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = threading.Event()
        self.reader: Reader | None = None
        self.rescuer: Rescuer | None = None
        self.pipeline: Pipeline | None = None
        self.breaker: StoreBreaker | None = None
        self.summary: Summary | None = None
        self._stop_requested = False

    # -- control -------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the worker to drain and stop (safe from another thread or a signal handler)."""
        self._stop_requested = True
        if self._loop is None or self._stop is None or self._loop.is_closed():
            return  # run() has not started yet: it will see the flag and stop at once
        self._loop.call_soon_threadsafe(self._stop_now, self._stop)

    def _stop_now(self, stop: asyncio.Event) -> None:
        stop.set()
        self.pool.wake()  # a reader or rescuer waiting for room sees the stop

    @property
    def counts(self) -> Snapshot:
        return self.metrics.snapshot()

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

    # -- run -----------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = False) -> Summary:
        """Run until asked to stop, then drain; returns the summary (never raises on Redis errors)."""
        s = self.settings
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        if self._stop_requested:
            stop.set()
        if handle_signals:
            self._install_signals(self._loop)
        client = self.client or connect(
            redis_url=s.redis_url,
            sentinels=s.sentinels,
            master_name=s.master_name,
            socket_timeout_s=s.socket_timeout_s,
        )
        try:
            await asyncio.to_thread(self.ledger.open)
            tasks = await self._start(client, stop)
        except BaseException:
            await self._close(client)
            raise
        self.started.set()
        try:
            await stop.wait()
        finally:
            self.summary = summary = await self._drain(tasks, client)
            await self._close(client)
        return summary

    async def _start(self, client: Client, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Create the group if needed and start the reader, the rescuer and the metrics loop."""
        s = self.settings
        self.breaker = breaker = StoreBreaker(
            self._probe_ledger, self.metrics, backlog=functools.partial(backlog, client, s)
        )
        self.pipeline = pipeline = self._pipeline(client, breaker)
        self.reader = Reader(client, s, pipeline.dispatch, self._has_room, breaker)
        self.rescuer = Rescuer(client, s, self.metrics, pipeline.dispatch, self._has_room, breaker)
        with contextlib.suppress(*REDIS_ERRORS):  # Redis may be down: the reader recovers later
            await ensure_group(client, s.stream, s.group)
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port, s.metrics_host)
        log.info(
            "worker %s reading %s as group %s (dedupe %s, parallelism %s, count %s)",
            s.consumer,
            s.stream,
            s.group,
            s.dedupe,
            s.parallelism,
            s.count,
        )
        tasks = [
            asyncio.create_task(self.reader.run(stop), name="reader"),
            asyncio.create_task(self._metrics_loop(client, stop), name="metrics"),
        ]
        if s.rescuer:
            tasks.append(asyncio.create_task(self.rescuer.run(stop), name="rescuer"))
        if s.sentinels:  # on +switch-master, drop the connections to a stalled old master
            watch = FailoverWatch(client, s.sentinels, s.master_name)
            tasks.append(asyncio.create_task(watch.run(), name="failover-watch"))
        return tasks

    async def _close(self, client: Client) -> None:
        # The signal handlers stay until the loop closes (asyncio.run removes them): a signal
        # that arrives after the drain, such as a second SIGTERM sent to the process group, is
        # logged by _on_signal instead of killing the process on its way out with -15.
        if self.client is None:
            with contextlib.suppress(*REDIS_ERRORS):
                await client.aclose()
        await asyncio.to_thread(self.ledger.close)

    async def _probe_ledger(self) -> None:
        await asyncio.to_thread(self.ledger.probe)

    def _pipeline(self, client: Client, breaker: StoreBreaker) -> Pipeline:
        s = self.settings
        acks = Acks(client, s.stream, s.group)
        deps = Deps(
            client=client,
            acks=acks,
            ledger=self.ledger,
            key_prefix=s.dedupe_prefix,
            ttl_s=s.dedupe_ttl_s,
            lease_ms=max(s.min_idle_ms, 1000),
            consumer=s.consumer,
        )
        return Pipeline(
            handler=self.handler,
            strategy=make_strategy(s.dedupe, deps),
            acks=acks,
            pool=self.pool,
            metrics=self.metrics,
            rules=Rules(consumer=s.consumer, max_attempts=s.max_attempts, order_key=s.order_key),
            breaker=breaker,
        )

    async def _has_room(self, stop: asyncio.Event) -> None:
        # Read again while earlier batches are still being worked on, committed and acked (the
        # next read's round trip overlaps that work), but never hold more than parallelism +
        # 2 * count messages: read at most count more while parallelism + count or fewer are in hand.
        await self.pool.wait_below(self.settings.parallelism + self.settings.count + 1, stop)

    async def _drain(self, tasks: list[asyncio.Task[None]], client: Client) -> Summary:
        started = time.monotonic()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.breaker is not None:
            await self.breaker.aclose()
        left = await self.pool.drain(self.settings.drain_timeout_s)
        settle_s = self.ledger.busy_timeout_ms / 1000 + SETTLE_MARGIN_S
        if self.pipeline is not None and not await self.pipeline.settle(settle_s):
            log.warning("a commit or XACK was still on its way after %ss; its messages stay pending", settle_s)
        if self.rescuer is not None:
            with contextlib.suppress(*REDIS_ERRORS):
                await self.rescuer.release_lease()
        counts = self.metrics.snapshot()
        elapsed_s = time.monotonic() - started
        log.info(
            "drain complete in %.2fs: processed=%s acked=%s errors=%s dead_lettered=%s reclaimed=%s "
            "dedupe_skipped=%s left_pending=%s%s",
            elapsed_s,
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

    async def _metrics_loop(self, client: Client, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.metrics_interval_s)
            if stop.is_set():
                return
            try:
                await self.refresh_gauges(client)
            except REDIS_ERRORS as exc:
                log.warning("metrics refresh failed: %s", describe(exc))
            except Exception as exc:  # a bug: said with its traceback; the worker goes on
                log.error("metrics refresh raised %s", describe(exc), exc_info=exc)
            log.info("metrics %s", self.metrics.values.line())

    async def refresh_gauges(self, client: Client) -> None:
        """``XINFO GROUPS``, ``XLEN`` and ``XRANGE - + COUNT 1`` in one pipeline -> the gauges."""
        s = self.settings
        async with client.pipeline(transaction=False) as pipe:
            pipe.xinfo_groups(s.stream)
            pipe.xlen(s.stream)
            pipe.xrange(s.stream, count=1)
            groups, length, first = await pipe.execute()
        pending, lag = group_numbers(groups, s.group)
        self.metrics.set("pending", pending)
        self.metrics.set("group_lag", math.nan if lag is None else lag)  # unknown is not 0
        self.metrics.set("stream_length", int(length))
        self.metrics.set("stream_age_s", stream_age_s(first[0][0] if first else None, time.time()))


async def backlog(client: Client, settings: Settings) -> str:
    """``XINFO GROUPS``: what waits for the group, for the log line of a store that is back."""
    pending, lag = group_numbers(await client.xinfo_groups(settings.stream), settings.group)
    return f"the group has {pending} pending and {'?' if lag is None else lag} not yet read"
