"""``billing-producer --cluster HOST:PORT --shards N``: each event to the shard its ``order_id`` routes to.

The stream's shards are the registered set (:func:`solutions.shards.ensure_shards`: the first
producer or worker plans and stores them; another N is refused with one clear line). An event
goes to shard ``shard_of(order_id, N)``, so every event of an order lands in one shard, in the
order it was made: per-key order starts here.

One sender per shard, each a :class:`~solutions.producer.Producer` on its shard's client, fed from
a queue of its own: a shard whose master is dead makes only its own events wait (and re-sends
them with backoff and the same ``event_id``, as ``--resend`` says), while the other shards are
sent on schedule. Every attempt is logged as a single-stream producer logs it (``--log``).

The shard clients give up on a failed send at once (``retry_for_s`` 0) instead of sending it again
themselves: a send whose connection broke is of *unknown* outcome, and only the producer may
decide to send it again (it logs that attempt); a ``CLUSTERDOWN`` reply comes back as a
*refused* attempt. Redirects (``MOVED`` after a failover or a reshard, ``ASK`` during one) are
still followed, since a redirected command did not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import IO

from solutions.cluster_router import ClusterRouter, RoutingOptions
from solutions.producer import Producer, Tally, make_event
from solutions.settings import SOCKET_MARGIN_S
from solutions.shards import ShardSet, ensure_shards, shard_of

log = logging.getLogger("solutions.producer")

Event = dict[str, str]


def routing_options(args: argparse.Namespace) -> RoutingOptions:
    """No retries inside the client (the producer's own re-sends are logged), a socket timeout above WAIT's."""
    wait_s = args.wait_timeout_ms / 1000 if args.wait_replicas else 0.0
    return RoutingOptions(socket_timeout_s=wait_s + SOCKET_MARGIN_S, retry_for_s=0.0)


class ShardProducer:
    """``--rate`` events a second over the shards of ``--stream``, one sender per shard."""

    def __init__(self, router: ClusterRouter, shards: ShardSet, args: argparse.Namespace, out: IO[str] | None):
        self.shards = shards
        self.args = args
        self.senders = [
            Producer(router.client(name), argparse.Namespace(**{**vars(args), "stream": name}), out)
            for name in shards.names
        ]
        self._queues: list[asyncio.Queue[Event | None]] = []

    @property
    def tally(self) -> Tally:
        """Every shard's tally, added up."""
        total = Tally()
        for sender in self.senders:
            for f in dataclasses.fields(Tally):
                setattr(total, f.name, getattr(total, f.name) + getattr(sender.tally, f.name))
        return total

    async def run(self, stop: asyncio.Event) -> Tally:
        """Make events on schedule until ``--count`` or ``stop``; each sender then sends what it holds."""
        a = self.args
        self._queues = [asyncio.Queue() for _ in self.senders]
        sending = [asyncio.create_task(self._send(i, stop)) for i in range(len(self.senders))]
        interval_s = 1.0 / a.rate if a.rate > 0 else 0.0
        started, made = time.monotonic(), 0
        while not stop.is_set() and (a.count is None or made < a.count):
            event = make_event(a.orders)
            self._queues[shard_of(event["order_id"], len(self.senders))].put_nowait(event)
            made += 1
            delay_s = started + made * interval_s - time.monotonic() if interval_s else 0.0
            if delay_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay_s)
            else:
                await asyncio.sleep(0)  # let the senders run
        for queue in self._queues:
            queue.put_nowait(None)
        await asyncio.gather(*sending)
        return self.tally

    async def _send(self, index: int, stop: asyncio.Event) -> None:
        sender, queue = self.senders[index], self._queues[index]
        while (event := await queue.get()) is not None:
            await sender.send(event, stop)


async def run_on_cluster(args: argparse.Namespace, stop: asyncio.Event, out: IO[str] | None) -> Tally:
    """Connect, find (or register) the shard set, and produce until done; the router is closed after."""
    router = await ClusterRouter.connect(args.cluster, routing_options(args))
    watch = asyncio.create_task(router.watch(), name="cluster-watch")
    try:
        shards = await ensure_shards(router, args.stream, args.shards)
        log.info("producing to %s shards of %s: %s", len(shards), args.stream, ", ".join(shards.names))
        return await ShardProducer(router, shards, args, out).run(stop)
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await router.aclose()
