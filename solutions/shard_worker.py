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
- one ledger (the business store) for every shard, and ``router.watch()`` as one more task, so a
  read blocked on a master that hangs moves to the promoted replica at once.

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
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.exceptions import RedisError

from solutions.acks import Acks
from solutions.cluster_router import ClusterRouter, RoutingOptions, ShardClient
from solutions.connection import Backoff, Streak, describe
from solutions.handler import BillingHandler, Handler
from solutions.idempotency import Deps, make_strategy
from solutions.ledger import Ledger
from solutions.metrics import Metrics, Snapshot, group_numbers, stream_age_s
from solutions.pipeline import Pipeline, Rules
from solutions.pool import Pool
from solutions.reader import OWN_PENDING, Reader, ensure_group
from solutions.rescuer import Rescuer
from solutions.settings import Settings
from solutions.shard_metrics import ShardMetrics, shard_metrics
from solutions.shards import ShardCountError, ShardSet, ensure_shards, shard_settings
from solutions.worker import SETTLE_MARGIN_S, Summary

log = logging.getLogger(__name__)

HandlerFactory = Callable[[Settings], Handler]


class ShardReader(Reader):
    """A :class:`Reader` on a shard client, which rides out a failover *inside* one call.

    The plain reader re-reads its own pending entries after an error, since a lost reply may
    have delivered some. The shard client retries a failed XREADGROUP itself (to the promoted
    replica), so the reader never sees that error: after a call the client had to retry, it
    goes back to its own pending entries the same way.
    """

    client: ShardClient

    async def read_once(self) -> None:
        before = self.client.failed_attempts
        await super().read_once()
        if self.client.failed_attempts != before:
            self.cursor = OWN_PENDING


@dataclass(frozen=True)
class ShardPart:
    """One shard's reader, rescuer and pipeline (with its own pool and metrics)."""

    index: int
    settings: Settings
    client: ShardClient
    metrics: Metrics
    pool: Pool
    pipeline: Pipeline
    reader: ShardReader
    rescuer: Rescuer

    @property
    def name(self) -> str:
        return self.settings.stream


def build_part(index: int, settings: Settings, client: ShardClient, handler: Handler, ledger: Ledger) -> ShardPart:
    """The parts of one shard; ``settings`` already name the shard as the stream."""
    s = settings
    metrics = shard_metrics(shard=s.stream, index=index, group=s.group, consumer=s.consumer)
    pool = Pool(s.parallelism)
    acks = Acks(client, s.stream, s.group)
    deps = Deps(client=client, acks=acks, ledger=ledger, key_prefix=s.dedupe_prefix, ttl_s=s.dedupe_ttl_s,
                lease_ms=max(s.min_idle_ms, 1000), consumer=s.consumer)
    pipeline = Pipeline(
        handler=handler,
        strategy=make_strategy(s.dedupe, deps),
        acks=acks,
        pool=pool,
        metrics=metrics,
        rules=Rules(consumer=s.consumer, max_attempts=s.max_attempts, order_key=s.order_key),
    )

    async def has_room(stop: asyncio.Event) -> None:
        # As Worker: read again while a batch is still being acked, but hold at most this many.
        await pool.wait_below(s.parallelism + s.count, stop)

    reader = ShardReader(client, s, pipeline.dispatch, has_room)
    rescuer = Rescuer(client, s, metrics, pipeline.dispatch, has_room)
    return ShardPart(index, s, client, metrics, pool, pipeline, reader, rescuer)


def default_handler(s: Settings) -> Handler:
    return BillingHandler(stream=s.stream, delay_ms=s.handler_delay_ms, jitter_ms=s.handler_jitter_ms,
                          fail_every=s.fail_every)


class ShardedWorker:
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
        self.settings = settings
        self.handler_factory = handler_factory or default_handler
        self.ledger = ledger or Ledger(settings.ledger)
        self.routing = routing or RoutingOptions(socket_timeout_s=settings.socket_timeout_s)
        self.router: ClusterRouter | None = None
        self.shard_set: ShardSet | None = None
        self.parts: list[ShardPart] = []
        self.metrics = ShardMetrics({})
        self.started = threading.Event()
        self.summary: Summary | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False

    # -- control -------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the worker to drain and stop (safe from another thread or a signal handler)."""
        self._stop_requested = True
        if self._loop is None or self._stop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._stop.set)

    @property
    def counts(self) -> Snapshot:
        """The totals over every shard."""
        return self.metrics.total()

    def shard_counts(self) -> dict[str, Snapshot]:
        return self.metrics.snapshots()

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self._stop_requested:
            log.info("%s again (pid %s): already draining", name, os.getpid())
            return
        log.info("received %s (pid %s): stop reading and drain (up to %ss)", name, os.getpid(),
                 self.settings.drain_timeout_s)
        self.request_stop()

    # -- run -----------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = False) -> Summary:
        """Run until asked to stop, then drain every shard; returns the summary over all shards.

        Raises :class:`~solutions.shards.ShardCountError` when the stream already has another
        number of shards (a setting to fix, not a fault to wait out).
        """
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        if self._stop_requested:
            stop.set()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    self._loop.add_signal_handler(sig, self._on_signal, sig)
        tasks: list[asyncio.Task[None]] = []
        try:
            if not await self._connect(stop):
                self.summary = Summary(Snapshot())
                return self.summary
            await asyncio.to_thread(self.ledger.open)
            tasks = await self._start(stop)
            self.started.set()
            await stop.wait()
            self.summary = await self._drain(tasks)
            return self.summary
        finally:
            for task in tasks:
                task.cancel()
            if self.router is not None:
                await self.router.aclose()
            await asyncio.to_thread(self.ledger.close)

    async def _connect(self, stop: asyncio.Event) -> bool:
        """The router and the shard set, retried with backoff while the cluster does not answer; False if stopped."""
        s = self.settings
        streak = Streak(log, f"connecting to the cluster at {', '.join(f'{h}:{p}' for h, p in s.cluster)}")
        backoff = Backoff(base_s=0.2, cap_s=2.0)
        while not stop.is_set():
            try:
                router = self.router or await ClusterRouter.connect(s.cluster, self.routing)
                self.router = router
                self.shard_set = await ensure_shards(router, s.stream, s.shards)
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
        self.parts = [
            build_part(i, settings, router.client(name), self.handler_factory(settings), self.ledger)
            for i, name in enumerate(shard_set.names)
            for settings in [shard_settings(s, name)]
        ]
        self.metrics = ShardMetrics({part.name: part.metrics for part in self.parts})
        for part in self.parts:
            with contextlib.suppress(RedisError):  # a shard whose master is down: its reader recovers later
                await ensure_group(part.client, part.name, s.group)
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port, s.metrics_host)
        log.info("worker %s reading %s shards of %s as group %s (dedupe %s, parallelism %s per shard, count %s): %s",
                 s.consumer, len(self.parts), s.stream, s.group, s.dedupe, s.parallelism, s.count,
                 ", ".join(f"{p.name}@{_owner(router, p.name)}" for p in self.parts))
        tasks = [asyncio.create_task(router.watch(), name="cluster-watch"),
                 asyncio.create_task(self._metrics_loop(stop), name="metrics")]
        for part in self.parts:
            tasks.append(asyncio.create_task(part.reader.run(stop), name=f"reader-{part.index}"))
            if s.rescuer:
                tasks.append(asyncio.create_task(part.rescuer.run(stop), name=f"rescuer-{part.index}"))
        return tasks

    async def _drain(self, tasks: list[asyncio.Task[None]]) -> Summary:
        started = time.monotonic()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        lefts = await asyncio.gather(*(p.pool.drain(self.settings.drain_timeout_s) for p in self.parts))
        left = [f"{part.name}/{msg_id}" for part, ids in zip(self.parts, lefts, strict=True) for msg_id in ids]
        settle_s = self.ledger.busy_timeout_ms / 1000 + SETTLE_MARGIN_S
        settled = await asyncio.gather(*(p.pipeline.settle(settle_s) for p in self.parts))
        if not all(settled):
            log.warning("a commit or XACK was still on its way after %ss; its messages stay pending", settle_s)
        for part in self.parts:
            with contextlib.suppress(RedisError):
                await part.rescuer.release_lease()
        counts = self.metrics.total()
        elapsed_s = time.monotonic() - started
        log.info(
            "drain complete in %.2fs over %s shards: processed=%s acked=%s errors=%s dead_lettered=%s reclaimed=%s "
            "dedupe_skipped=%s left_pending=%s%s",
            elapsed_s, len(self.parts), counts.processed, counts.acked, counts.errors, counts.dead_lettered,
            counts.reclaimed, counts.dedupe_skipped, len(left), (" ids=" + ",".join(left)) if left else "",
        )
        return Summary(counts, left, elapsed_s)

    # -- metrics -------------------------------------------------------------------------

    async def _metrics_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.metrics_interval_s)
            if stop.is_set():
                return
            await self.refresh_gauges()
            log.info("metrics %s", self.metrics.line())

    async def refresh_gauges(self) -> None:
        """Every shard's gauges at once; a shard whose master is away keeps its last values."""
        timeout_s = max(1.0, self.settings.metrics_interval_s)
        results = await asyncio.gather(*(refresh_part(p, timeout_s) for p in self.parts), return_exceptions=True)
        for part, result in zip(self.parts, results, strict=True):
            if isinstance(result, Exception):
                log.warning("metrics refresh of %s failed: %s", part.name, describe(result))


async def refresh_part(part: ShardPart, timeout_s: float) -> None:
    """``XINFO GROUPS``, ``XLEN`` and ``XRANGE - + COUNT 1`` of one shard in one pipeline -> its gauges.

    At most ``timeout_s``: the shard client would wait out a dead master for ``retry_for_s``.
    """
    s = part.settings
    async with part.client.pipeline(transaction=False) as pipe:
        pipe.xinfo_groups(s.stream)
        pipe.xlen(s.stream)
        pipe.xrange(s.stream, count=1)
        groups, length, first = await asyncio.wait_for(pipe.execute(), timeout_s)
    pending, lag = group_numbers(groups, s.group)
    part.metrics.set("pending", pending)
    part.metrics.set("group_lag", lag)
    part.metrics.set("stream_length", int(length))
    part.metrics.set("stream_age_s", stream_age_s(first[0][0] if first else None, time.time()))


def _owner(router: ClusterRouter, key: str) -> str:
    addr = router.owner(key)
    return f"{addr[0]}:{addr[1]}" if addr else "?"
