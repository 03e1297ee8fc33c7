"""The sharded worker: a stream on Redis Cluster as N shards, one reader and one rescuer per shard.

``billing-worker --cluster HOST:PORT --shards N`` runs :class:`ShardedWorker`. On a cluster a
stream ``orders`` is N keys ``orders:{<tag>}`` (:mod:`solutions.shards`), each in its own slot,
spread over the masters. The worker:

- connects one :class:`~solutions.cluster_router.ClusterRouter` (a slot map, no ``COMMAND
  GETKEYS``), retrying with backoff and one log line while no node answers;
- takes the shard set from ``<stream>:shards`` (:func:`~solutions.shards.ensure_shards`: written
  once by the first process, so a worker asking for another N stops with one clear line);
- per shard: the shard's client (every command to the master of its slot, MOVED / ASK / a
  failover followed, CLUSTERDOWN and a dead master waited out with backoff and one log line each
  way), settings with the stream set to the shard (so its DLQ, rescuer lease and dedupe markers
  carry its hash tag and every script stays in its slot), a :class:`~solutions.reader.Reader`, a
  :class:`~solutions.rescuer.Rescuer`, and a :class:`~solutions.pipeline.Pipeline` with its own
  lanes and ``--parallelism`` slots;
- one ledger (the business store) and one breaker for it (:mod:`solutions.store_breaker`: a
  store outage pauses every shard), and ``router.watch()`` as one more task, so a read blocked
  on a master that hangs moves to the promoted replica at once.

The run, the drain and the summary are :class:`~solutions.lifecycle.Lifecycle`'s, as for the
plain worker; each shard is a :class:`~solutions.stream_part.StreamPart`.

Why each shard has its own pool: while one shard's master is dead, that shard's runs wait in
their XACK (the router retries it for ``retry_for_s``) and its reader waits in XREADGROUP. In a
pool shared by every shard those runs would fill the room the other shards' readers wait for,
and a dead master would stop every shard; with a pool per shard the others do not notice.
``--parallelism`` is therefore per shard here.

Per-key order: the producer puts every event of an order in one shard (``shard_of(order_id)``),
and the shard's pipeline runs the events of one ``order_id`` one after another in stream order.
There is no order *between* shards, and none is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.exceptions import RedisError

from solutions.cluster_router import ClusterRouter, RoutingOptions, ShardClient
from solutions.connection import Backoff, Streak, describe
from solutions.handler import Handler, billing_handler
from solutions.ledger import Ledger
from solutions.lifecycle import Lifecycle
from solutions.metrics import Snapshot, format_gauge
from solutions.pool import Pool
from solutions.reader import OWN_PENDING, Reader
from solutions.settings import Settings
from solutions.shard_metrics import EveryShard, ShardMetrics, shard_metrics
from solutions.shards import ShardCountError, ShardSet, ensure_shards, shard_settings
from solutions.stream_part import StreamPart, build_part, refresh_gauges

log = logging.getLogger(__name__)

HandlerFactory = Callable[[Settings], Handler]


class ShardReader(Reader):
    """A :class:`Reader` on a shard client, which rides out a failover *inside* one call.

    The plain reader re-reads its own pending entries after an error, since a lost reply may
    have delivered some. The shard client retries a failed XREADGROUP itself (to the promoted
    replica), so the reader never sees that error: after a call the client had to retry, it
    goes back to its own pending entries the same way.
    """

    async def read_once(self) -> None:
        client = self.client
        before = client.failed_attempts if isinstance(client, ShardClient) else 0
        await super().read_once()
        if isinstance(client, ShardClient) and client.failed_attempts != before:
            self.cursor = OWN_PENDING


class ShardedWorker(Lifecycle):
    """One consumer of ``settings.group`` on every shard of ``settings.stream`` (``settings.cluster`` set)."""

    def __init__(
        self,
        settings: Settings,
        *,
        handler_factory: HandlerFactory | None = None,
        ledger: Ledger | None = None,
        routing: RoutingOptions | None = None,
    ) -> None:
        if not settings.cluster:
            raise ValueError("a sharded worker needs settings.cluster (a startup node)")
        super().__init__(settings, ledger)
        self.handler_factory = handler_factory or billing_handler
        self.routing = routing or RoutingOptions(socket_timeout_s=settings.socket_timeout_s)
        self.router: ClusterRouter | None = None
        self.shard_set: ShardSet | None = None
        self.parts: list[StreamPart] = []
        self.metrics = ShardMetrics({})

    @property
    def counts(self) -> Snapshot:
        """The totals over every shard."""
        return self.metrics.total()

    def shard_counts(self) -> dict[str, Snapshot]:
        return self.metrics.snapshots()

    def stream_parts(self) -> list[StreamPart]:
        return list(self.parts)

    def _metrics_line(self) -> str:
        return self.metrics.line()

    # -- the hooks of the run ------------------------------------------------------------

    async def _open(self, stop: asyncio.Event) -> bool:
        """The router and the shard set, retried with backoff while the cluster does not answer.

        Raises :class:`~solutions.shards.ShardCountError` when the stream already has another
        number of shards (a setting to fix, not a fault to wait out).
        """
        s = self.settings
        streak = Streak(log, f"connecting to the cluster at {', '.join(f'{h}:{p}' for h, p in s.cluster)}")
        backoff = Backoff(base_s=0.2, cap_s=2.0)
        while not stop.is_set():
            try:
                self.router = self.router or await ClusterRouter.connect(s.cluster, self.routing)
                self.shard_set = await ensure_shards(self.router, s.stream, s.shards)
            except ShardCountError:
                raise
            except (RedisError, OSError) as exc:
                streak.failed(exc)
                await backoff.sleep(stop)
                continue
            streak.recovered()
            return True
        return False

    async def _start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        s, router, shard_set = self.settings, self.router, self.shard_set
        assert router is not None and shard_set is not None
        shards = {name: shard_settings(s, name) for name in shard_set.names}
        metrics = {name: shard_metrics(shard=name, index=i, group=s.group, consumer=s.consumer)
                   for i, name in enumerate(shards)}
        self.metrics = ShardMetrics(metrics)
        breaker = self._new_breaker(EveryShard(list(metrics.values())), self._backlog)
        self.parts = [
            build_part(router.client(name), settings, handler=self.handler_factory(settings), ledger=self.ledger,
                       metrics=metrics[name], pool=Pool(s.parallelism), breaker=breaker, reader_class=ShardReader)
            for name, settings in shards.items()
        ]
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port, s.metrics_host)
        log.info("worker %s reading %s shards of %s as group %s (dedupe %s, parallelism %s per shard, count %s): %s",
                 s.consumer, len(self.parts), s.stream, s.group, s.dedupe, s.parallelism, s.count,
                 ", ".join(f"{p.name}@{_owner(router, p.name)}" for p in self.parts))
        tasks = [asyncio.create_task(router.watch(), name="cluster-watch"),
                 asyncio.create_task(self._metrics_loop(stop), name="metrics")]
        for i, part in enumerate(self.parts):
            tasks += await self._start_part(part, stop, f"-{i}")
        return tasks

    async def _close(self) -> None:
        if self.router is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.router.aclose()

    async def _backlog(self) -> str:
        """What waits in every shard, for the log line of a store that is back."""
        await self._refresh_gauges()
        total = self.metrics.total()
        # one shard's unknown lag makes the total unknown ("?")
        return f"the shards have {format_gauge(total.pending)} pending and {format_gauge(total.group_lag)} not yet read"

    async def _refresh_gauges(self) -> None:
        """Every shard's gauges at once, each at most a metrics interval: a shard client would wait
        out a dead master for ``retry_for_s``; that shard keeps its last values meanwhile."""
        timeout_s = max(1.0, self.settings.metrics_interval_s)
        results = await asyncio.gather(
            *(asyncio.wait_for(refresh_gauges(p.client, p.settings, p.metrics), timeout_s) for p in self.parts),
            return_exceptions=True,
        )
        for part, result in zip(self.parts, results, strict=True):
            if isinstance(result, Exception):
                log.warning("metrics refresh of %s failed: %s", part.name, describe(result))


def _owner(router: ClusterRouter, key: str) -> str:
    addr = router.owner(key)
    return f"{addr[0]}:{addr[1]}" if addr else "?"
