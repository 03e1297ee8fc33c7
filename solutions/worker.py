"""The worker: the parts of a stream (a reader, a rescuer and the message pipeline each) on a site.

``await Worker(settings).run()`` opens the site, starts every part and runs until
:meth:`Worker.request_stop` (or, with ``handle_signals=True``, SIGINT/SIGTERM). Then it drains
(:func:`solutions.drain.drain`: stop reading and claiming, let the in-flight handlers finish
within ``drain_timeout_s``, wait for the commits and XACKs on their way, never ack what was not
done, log one line with ``drain complete`` and the counts) and returns a
:class:`~solutions.drain.Summary`. Signal handling is opt-in so that the same worker runs as
asyncio tasks inside a notebook.

Where the stream lives is the :class:`~solutions.site.Site`'s business: one stream by URL or
Sentinel (:class:`~solutions.site.StreamSite`, the default), or the shards of a stream on Redis
Cluster (``Worker(settings, site=ClusterSite(settings))``, :mod:`solutions.cluster_site`). The
worker runs one :class:`~solutions.stream_part.StreamPart` per place the site names, each on
the place's own client (its XACK, DLQ and markers go where its stream is) and with a pool of its
own, and shares the handler's settings, the ledger and the store's breaker between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

from solutions.connection import REDIS_ERRORS, Client, describe
from solutions.drain import SETTLE_MARGIN_S, Summary, drain, settle_s
from solutions.handler import Handler, billing_handler
from solutions.ledger import Ledger
from solutions.metrics import EveryPart, Metrics, Snapshot, WorkerMetrics, format_gauge, part_metrics
from solutions.pipeline import Pipeline
from solutions.pool import Pool
from solutions.reader import Reader, ensure_group
from solutions.rescuer import Rescuer
from solutions.settings import Settings
from solutions.site import Place, Site, StreamSite
from solutions.store_breaker import StoreBreaker
from solutions.stream_part import StreamPart, backlog, build_part, refresh_gauges

log = logging.getLogger(__name__)

__all__ = ["SETTLE_MARGIN_S", "HandlerFactory", "Summary", "Worker", "backlog"]

HandlerFactory = Callable[[Settings], Handler]


class Worker:
    """One consumer of ``settings.group`` on every part of ``settings.stream`` its site names."""

    def __init__(
        self,
        settings: Settings,
        *,
        handler: Handler | None = None,
        handler_factory: HandlerFactory | None = None,
        client: Client | None = None,
        ledger: Ledger | None = None,
        site: Site | None = None,
    ) -> None:
        if site is None and settings.cluster:
            raise ValueError("settings.cluster is set: pass site=solutions.cluster_site.ClusterSite(settings)")
        self.settings = settings
        self.ledger = ledger or Ledger(settings.ledger, busy_timeout_ms=settings.ledger_busy_timeout_ms)
        if handler is not None:
            self.handler_factory: HandlerFactory = lambda _settings: handler
        else:
            self.handler_factory = handler_factory or billing_handler
        self.site = site or StreamSite(settings, client)
        self.parts: list[StreamPart] = []
        # A plain stream's metrics and pool exist before the run (a notebook reads them at once).
        self.metrics = WorkerMetrics({} if settings.cluster else {settings.stream: self._part_metrics(settings, None)})
        self._first_pool = Pool(settings.parallelism)
        self.started = threading.Event()
        self.breaker: StoreBreaker | None = None
        self.summary: Summary | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False

    def _part_metrics(self, settings: Settings, shard_index: int | None) -> Metrics:
        s = self.settings
        return part_metrics(stream=settings.stream, group=s.group, consumer=s.consumer, shard_index=shard_index)

    # -- what a worker says about itself ---------------------------------------------------

    @property
    def counts(self) -> Snapshot:
        """The totals over every part."""
        return self.metrics.total()

    def shard_counts(self) -> dict[str, Snapshot]:
        """Each part's numbers, by its stream key (a shard's key on a cluster)."""
        return self.metrics.snapshots()

    def stream_parts(self) -> list[StreamPart]:
        """The parts started so far."""
        return list(self.parts)

    @property
    def part(self) -> StreamPart | None:
        return self.parts[0] if self.parts else None

    @property
    def pool(self) -> Pool:
        """The first part's pool (a plain stream's only one)."""
        return self.parts[0].pool if self.parts else self._first_pool

    @property
    def reader(self) -> Reader | None:
        return self.part.reader if self.part else None

    @property
    def rescuer(self) -> Rescuer | None:
        return self.part.rescuer if self.part else None

    @property
    def pipeline(self) -> Pipeline | None:
        return self.part.pipeline if self.part else None

    # -- control ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the worker to drain and stop (safe from another thread or a signal handler)."""
        self._stop_requested = True
        if self._loop is None or self._stop is None or self._loop.is_closed():
            return  # run() has not started yet: it will see the flag and stop at once
        self._loop.call_soon_threadsafe(self._stop_now, self._stop)

    def _stop_now(self, stop: asyncio.Event) -> None:
        stop.set()
        for part in self.parts:
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
            if not await self.site.open(stop):
                log.info("drain complete: asked to stop before Redis answered; nothing was read")
                self.summary = Summary(self.counts)
                await self._close()
                return self.summary
            await asyncio.to_thread(self.ledger.open)
            tasks = await self._start(stop)
        except BaseException:
            await self._close()
            raise
        self.started.set()
        try:
            await stop.wait()
        finally:
            self.summary = summary = await drain(
                tasks,
                list(self.parts),
                drain_timeout_s=self.settings.drain_timeout_s,
                settle_timeout_s=settle_s(self.ledger.busy_timeout_ms),
                breaker=self.breaker,
                counts=lambda: self.counts,
            )
            await self._close()
        return summary

    async def _close(self) -> None:
        """Close the site's clients, then the ledger (its last checkpoint).

        The signal handlers stay until the loop closes (asyncio.run removes them): a signal
        that arrives after the drain, such as a second SIGTERM sent to the process group, is
        logged by :meth:`_on_signal` instead of killing the process on its way out with -15.
        """
        await self.site.aclose()
        await asyncio.to_thread(self.ledger.close)

    async def _start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Build a part per place, start their readers and rescuers, the site's watchers and the metrics loop."""
        s, places = self.settings, self.site.places()
        known = self.metrics.parts
        metrics = {p.name: known.get(p.name) or self._part_metrics(p.settings, p.shard_index) for p in places}
        self.metrics = WorkerMetrics(metrics)
        self.breaker = breaker = StoreBreaker(self._probe_ledger, EveryPart(list(metrics.values())),
                                              backlog=self._backlog)
        pools = [self._first_pool, *(Pool(s.parallelism) for _ in places[1:])]
        self.parts = [self._build(place, metrics[place.name], pool, breaker)
                      for place, pool in zip(places, pools, strict=True)]
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port, s.metrics_host)
        per = " per shard" if len(self.parts) > 1 else ""
        log.info("worker %s reading %s as group %s (dedupe %s, parallelism %s%s, count %s)",
                 s.consumer, self.site.describe(s), s.group, s.dedupe, s.parallelism, per, s.count)
        tasks = [asyncio.create_task(body, name=name) for name, body in self.site.watchers()]
        tasks.append(asyncio.create_task(self._metrics_loop(stop), name="metrics"))
        named = len(self.parts) > 1
        for i, part in enumerate(self.parts):
            tasks += await self._start_part(part, stop, f"-{i}" if named else "")
        return tasks

    def _build(self, place: Place, metrics: Metrics, pool: Pool, breaker: StoreBreaker) -> StreamPart:
        return build_part(place.client, place.settings, handler=self.handler_factory(place.settings),
                          ledger=self.ledger, metrics=metrics, pool=pool, breaker=breaker,
                          reader_class=place.reader_class)

    async def _start_part(self, part: StreamPart, stop: asyncio.Event, tag: str = "") -> list[asyncio.Task[None]]:
        """Create ``part``'s group if need be (its Redis may be down: the reader recovers later),
        and start its reader and, unless ``--no-rescuer``, its rescuer; their tasks."""
        with contextlib.suppress(*REDIS_ERRORS):
            await ensure_group(part.client, part.name, part.settings.group)
        tasks = [asyncio.create_task(part.reader.run(stop), name=f"reader{tag}")]
        if self.settings.rescuer:
            tasks.append(asyncio.create_task(part.rescuer.run(stop), name=f"rescuer{tag}"))
        return tasks

    async def _probe_ledger(self) -> None:
        await asyncio.to_thread(self.ledger.probe)

    async def _backlog(self) -> str:
        """What waits for the group, for the log line of a store that is back."""
        if len(self.parts) == 1:
            return await backlog(self.parts[0].client, self.parts[0].settings)
        await self._refresh_gauges()
        total = self.metrics.total()
        # one shard's unknown lag makes the total unknown ("?")
        return f"the shards have {format_gauge(total.pending)} pending and {format_gauge(total.group_lag)} not yet read"

    # -- gauges ----------------------------------------------------------------------------

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
            log.info("metrics %s", self.metrics.line())

    async def _refresh_gauges(self) -> None:
        """Every part's gauges. A plain stream's errors go to the metrics loop's log line; on a
        cluster each shard gets at most a metrics interval (its client would wait out a dead
        master for ``retry_for_s``) and keeps its last values meanwhile."""
        if len(self.parts) == 1:
            part = self.parts[0]
            await refresh_gauges(part.client, part.settings, part.metrics)
            return
        timeout_s = max(1.0, self.settings.metrics_interval_s)
        results = await asyncio.gather(
            *(asyncio.wait_for(refresh_gauges(p.client, p.settings, p.metrics), timeout_s) for p in self.parts),
            return_exceptions=True,
        )
        for part, result in zip(self.parts, results, strict=True):
            if isinstance(result, Exception):
                log.warning("metrics refresh of %s failed: %s", part.name, describe(result))

    async def refresh_gauges(self, client: Client) -> None:
        """A plain stream's gauges from ``client``: ``XINFO GROUPS``, ``XLEN`` and ``XRANGE - + COUNT 1``."""
        (metrics,) = self.metrics.parts.values()
        await refresh_gauges(client, self.settings, metrics)
