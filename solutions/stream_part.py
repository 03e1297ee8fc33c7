"""One stream's reader, rescuer and pipeline, with the pool and the metrics they share.

A :class:`~solutions.worker.Worker` has one part per place its site names: one for a plain
stream, one per shard of a stream on Redis Cluster, each on the client of its shard's slot and
with a pool of its own. :func:`build_part` wires a part to a
client and to what the worker shares between its parts (the handler's settings, the ledger, the
store's breaker); :func:`refresh_gauges` samples its stream for the metrics.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from solutions.acks import Acks
from solutions.connection import Client
from solutions.handler import Handler
from solutions.idempotency import Deps, make_strategy
from solutions.ledger import Ledger
from solutions.metrics import Metrics, group_numbers, stream_age_s
from solutions.pipeline import Pipeline, Rules
from solutions.pool import Pool
from solutions.reader import Reader
from solutions.rescuer import Rescuer
from solutions.settings import Settings
from solutions.store_breaker import StoreBreaker


@dataclass(frozen=True)
class StreamPart:
    """The reader, rescuer and pipeline of one stream (``settings.stream``), on one client."""

    settings: Settings
    client: Client
    metrics: Metrics
    pool: Pool
    pipeline: Pipeline
    reader: Reader
    rescuer: Rescuer

    @property
    def name(self) -> str:
        return self.settings.stream


def build_part(
    client: Client,
    settings: Settings,
    *,
    handler: Handler,
    ledger: Ledger,
    metrics: Metrics,
    pool: Pool,
    breaker: StoreBreaker,
    reader_class: type[Reader] = Reader,
) -> StreamPart:
    """The pipeline (acks, dedupe strategy, rules) and the reader and rescuer that feed it."""
    s = settings
    acks = Acks(client, s.stream, s.group)
    deps = Deps(
        client=client,
        acks=acks,
        ledger=ledger,
        key_prefix=s.dedupe_prefix,
        ttl_s=s.dedupe_ttl_s,
        lease_ms=max(s.min_idle_ms, 1000),
        consumer=s.consumer,
    )
    pipeline = Pipeline(
        handler=handler,
        strategy=make_strategy(s.dedupe, deps),
        acks=acks,
        pool=pool,
        metrics=metrics,
        rules=Rules(consumer=s.consumer, max_attempts=s.max_attempts, order_key=s.order_key),
        breaker=breaker,
    )

    async def has_room(stop: asyncio.Event) -> None:
        # Read again while earlier batches are still being worked on, committed and acked (the
        # next read's round trip overlaps that work), but never hold more than parallelism +
        # 2 * count messages: read at most count more while parallelism + count or fewer are in hand.
        await pool.wait_below(s.parallelism + s.count + 1, stop)

    reader = reader_class(client, s, pipeline.dispatch, has_room, breaker)
    rescuer = Rescuer(client, s, metrics, pipeline.dispatch, has_room, breaker)
    return StreamPart(s, client, metrics, pool, pipeline, reader, rescuer)


async def refresh_gauges(client: Client, settings: Settings, metrics: Metrics) -> None:
    """``XINFO GROUPS``, ``XLEN`` and ``XRANGE - + COUNT 1`` in one pipeline -> the gauges."""
    s = settings
    async with client.pipeline(transaction=False) as pipe:
        pipe.xinfo_groups(s.stream)
        pipe.xlen(s.stream)
        pipe.xrange(s.stream, count=1)
        groups, length, first = await pipe.execute()
    pending, lag = group_numbers(groups, s.group)
    metrics.set("pending", pending)
    metrics.set("group_lag", math.nan if lag is None else lag)  # unknown is not 0
    metrics.set("stream_length", int(length))
    metrics.set("stream_age_s", stream_age_s(first[0][0] if first else None, time.time()))


async def backlog(client: Client, settings: Settings) -> str:
    """``XINFO GROUPS``: what waits for the group, for the log line of a store that is back."""
    pending, lag = group_numbers(await client.xinfo_groups(settings.stream), settings.group)
    return f"the group has {pending} pending and {'?' if lag is None else lag} not yet read"
