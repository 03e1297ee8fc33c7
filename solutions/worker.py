"""The worker: the parts of a stream (a reader, a rescuer and the message pipeline each) on a site.

``await Worker(settings).run()`` runs until :meth:`Worker.request_stop` (or, with
``handle_signals=True``, SIGINT/SIGTERM). Then it stops reading and claiming, lets the
in-flight handlers finish within ``drain_timeout_s``, waits for the commits and XACKs on
their way (:meth:`~solutions.pipeline.Pipeline.settle`), never acks what was not done, logs one
line with ``drain complete`` and the counts (and the ids left pending if the deadline hit),
and returns a :class:`Summary`. Signal handling is opt-in so that the same worker runs as
asyncio tasks inside a notebook. The run and the drain are :class:`~solutions.lifecycle.Lifecycle`'s.

Where the stream lives is the :class:`~solutions.site.Site`'s business: one stream by URL or
Sentinel (:class:`~solutions.site.StreamSite`, the default), or the shards of a stream on Redis
Cluster (``Worker(settings, site=ClusterSite(settings))``, :mod:`solutions.cluster_site`). The
worker runs one :class:`~solutions.stream_part.StreamPart` per place the site names, each on
the place's own client (its XACK, DLQ and markers go where its stream is) and with a pool of its
own, and shares the handler's settings, the ledger and the store's breaker between them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from solutions.connection import Client, describe
from solutions.handler import Handler, billing_handler
from solutions.ledger import Ledger
from solutions.lifecycle import SETTLE_MARGIN_S, Lifecycle, Summary
from solutions.metrics import EveryPart, Metrics, Snapshot, WorkerMetrics, format_gauge, part_metrics
from solutions.pipeline import Pipeline
from solutions.pool import Pool
from solutions.reader import Reader
from solutions.rescuer import Rescuer
from solutions.settings import Settings
from solutions.site import Place, Site, StreamSite
from solutions.store_breaker import StoreBreaker
from solutions.stream_part import StreamPart, backlog, build_part, refresh_gauges

log = logging.getLogger(__name__)

__all__ = ["SETTLE_MARGIN_S", "HandlerFactory", "Summary", "Worker", "backlog"]

HandlerFactory = Callable[[Settings], Handler]


class Worker(Lifecycle):
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
        super().__init__(settings, ledger)
        if handler is not None:
            self.handler_factory: HandlerFactory = lambda _settings: handler
        else:
            self.handler_factory = handler_factory or billing_handler
        self.site = site or StreamSite(settings, client)
        self.parts: list[StreamPart] = []
        # A plain stream's metrics and pool exist before the run (a notebook reads them at once).
        self.metrics = WorkerMetrics({} if settings.cluster else {settings.stream: self._part_metrics(settings, None)})
        self._first_pool = Pool(settings.parallelism)

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

    def _metrics_line(self) -> str:
        return self.metrics.line()

    # -- the hooks of the run ------------------------------------------------------------

    async def _open(self, stop: asyncio.Event) -> bool:
        return await self.site.open(stop)

    async def _start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Build a part per place, start their readers and rescuers, the site's watchers and the metrics loop."""
        s, places = self.settings, self.site.places()
        known = self.metrics.parts
        metrics = {p.name: known.get(p.name) or self._part_metrics(p.settings, p.shard_index) for p in places}
        self.metrics = WorkerMetrics(metrics)
        breaker = self._new_breaker(EveryPart(list(metrics.values())), self._backlog)
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

    async def _close(self) -> None:
        # The signal handlers stay until the loop closes (asyncio.run removes them): a signal
        # that arrives after the drain, such as a second SIGTERM sent to the process group, is
        # logged by _on_signal instead of killing the process on its way out with -15.
        await self.site.aclose()

    async def _backlog(self) -> str:
        """What waits for the group, for the log line of a store that is back."""
        if len(self.parts) == 1:
            return await backlog(self.parts[0].client, self.parts[0].settings)
        await self._refresh_gauges()
        total = self.metrics.total()
        # one shard's unknown lag makes the total unknown ("?")
        return f"the shards have {format_gauge(total.pending)} pending and {format_gauge(total.group_lag)} not yet read"

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
