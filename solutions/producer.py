"""``billing-producer``: order events at a steady rate (also ``python -m solutions.producer``).

Each event gets a unique ``event_id``. One *attempt* to send it is ``XADD`` and, with
``--wait-replicas N``, ``WAIT N timeout`` on the same connection (one pipeline). An attempt
ends in one of three statuses:

- ``confirmed``: the XADD returned an id (and, with ``--wait-replicas N``, at least N replicas
  acknowledged it);
- ``refused``: Redis replied to the XADD with an error (``OOM``, ``READONLY``, ``LOADING`` ...):
  the entry is known NOT to be in the stream, so sending it again cannot duplicate it;
- ``unknown``: the connection failed or timed out around the XADD, or WAIT saw fewer than N
  replicas: the entry may or may not be (or stay) in the stream.

``--resend N`` sends an event whose attempt was ``unknown`` or ``refused`` again, with the
same ``event_id`` and fields, up to N more times (with backoff), until one attempt is
confirmed, as a producer that must not drop an event does. A re-sent ``unknown`` may put the
event into the stream twice: that duplicate is the consumer's to absorb (dedupe by
``event_id``). Without ``--resend`` (the default, 0) each event is sent once. A re-send in
progress stops at SIGINT/SIGTERM.

``--log PATH`` gets one JSON line per *attempt* (appended, flushed at once)::

    {"event_id": "9f0c...", "attempt": 1, "status": "unknown", "msg_id": null,
     "replicas": null, "error": "ConnectionError: Connection closed by server.",
     "time": 1718000000.123, "order_id": "order-42", "amount": "12.34"}

``attempt`` counts from 1 (the first send; 2 and more are re-sends of the same event);
``msg_id`` is the id the XADD returned (null when it did not return one); ``replicas`` is
WAIT's reply (null without ``--wait-replicas``); ``error`` says why an attempt was not
confirmed (null when it was); ``time`` is the unix time when the attempt ended. An event's
outcome is its best attempt: confirmed if any attempt was, else refused if every attempt
was, else unknown. The exit code is 1 when no event was confirmed at all.

Where events go is a :class:`~solutions.site.Site`, the same kind the worker reads from
(:meth:`ProducerOptions.site <solutions.producer_options.ProducerOptions.site>`): one stream by
URL or Sentinel (:class:`~solutions.site.StreamSite`, with its failover watch), or with
``--cluster HOST:PORT --shards N`` the shards of a stream on Redis Cluster
(:class:`~solutions.cluster_site.ClusterSite`). The shards are the registered set
(:func:`solutions.shards.ensure_shards`: the first producer or worker plans and stores them;
another N is refused with one clear line), and an event goes to shard ``shard_of(order_id, N)``,
so every event of an order lands in one shard, in the order it was made: per-key order starts
here. Either way one :class:`Producer` makes the events on one schedule and hands each to the
:class:`~solutions.sender.Sender` of its place. With several shards each sender has a queue of
its own: a shard whose master is dead makes only its own events wait (and re-sends them with
backoff and the same ``event_id``), while the other shards are sent on schedule.

The shard clients give up on a failed send at once (``retry_for_s`` 0) instead of sending it again
themselves: a send whose connection broke is of *unknown* outcome, and only the producer may
decide to send it again (it logs that attempt); a ``CLUSTERDOWN`` reply comes back as a
*refused* attempt. Redirects (``MOVED`` after a failover or a reshard, ``ASK`` during one) are
still followed, since a redirected command did not run.

The flags become a :class:`~solutions.producer_options.ProducerOptions`; the connection flags
(``--redis-url``, ``--sentinel``, ``--master-name``, ``--cluster``, ``--shards``) are the
worker's own, from :func:`solutions.cli.add_connection_flags`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import IO

from redis.exceptions import RedisError

from solutions.cancelling import cancel_and_wait
from solutions.cli import HelpFormatter, Parser, add_connection_flags, cluster_stream_problem
from solutions.connection import describe
from solutions.producer_options import ProducerOptions, options_from_args
from solutions.sender import CONFIRMED, REFUSED, UNKNOWN, Outcome, Sender, Tally, make_event
from solutions.settings import InputError
from solutions.shards import shard_of

log = logging.getLogger("solutions.producer")
WATCH_STOP_TIMEOUT_S = 5.0  # the failover or slot-map watch at exit (solutions.cancelling)

__all__ = ["CONFIRMED", "REFUSED", "UNKNOWN", "Outcome", "Producer", "ProducerOptions", "Sender", "Tally",
           "build_parser", "main", "make_event"]

Event = dict[str, str]


async def schedule(rate: float, count: int | None, stop: asyncio.Event) -> AsyncIterator[int]:
    """Yield 0, 1, 2 ... at ``rate`` per second (0: as fast as the body allows) until ``count`` or ``stop``.

    The n-th yield is due at ``start + n / rate``: a slow body (a re-send with backoff) is made
    up for afterwards, never by sending faster than the schedule's total.
    """
    interval_s = 1.0 / rate if rate > 0 else 0.0
    started, made = time.monotonic(), 0
    while not stop.is_set() and (count is None or made < count):
        yield made
        made += 1
        delay_s = started + made * interval_s - time.monotonic() if interval_s else 0.0
        if delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay_s)
        else:
            await asyncio.sleep(0)  # let the senders run


class Producer:
    """``rate`` events a second, each to the sender of its stream: one, or one per shard (``route``)."""

    def __init__(self, senders: list[Sender], options: ProducerOptions,
                 route: Callable[[Event], int] | None = None) -> None:
        if not senders:
            raise ValueError("a producer needs at least one sender")
        self.senders = senders
        self.options = options
        self.route = route or (lambda event: shard_of(event["order_id"], len(senders)))
        self._queues: list[asyncio.Queue[Event | None]] = []

    @property
    def tally(self) -> Tally:
        """Every sender's tally, added up."""
        total = Tally()
        for sender in self.senders:
            total.add(sender.tally)
        return total

    async def run(self, stop: asyncio.Event) -> Tally:
        """Make events on schedule until ``count`` or ``stop``; each sender then sends what it holds.

        One sender sends each event before the next is made (a re-send delays the schedule, which
        catches up after); several send from queues of their own, so that a dead shard holds up
        only its own events.
        """
        o = self.options
        if len(self.senders) == 1:
            (sender,) = self.senders
            async for _ in schedule(o.rate, o.count, stop):
                await sender.send(make_event(o.orders), stop)
            return self.tally
        self._queues = [asyncio.Queue() for _ in self.senders]
        sending = [asyncio.create_task(self._send(i, stop)) for i in range(len(self.senders))]
        async for _ in schedule(o.rate, o.count, stop):
            event = make_event(o.orders)
            self._queues[self.route(event)].put_nowait(event)
        for queue in self._queues:
            queue.put_nowait(None)
        await asyncio.gather(*sending)
        return self.tally

    async def _send(self, index: int, stop: asyncio.Event) -> None:
        sender, queue = self.senders[index], self._queues[index]
        while (event := await queue.get()) is not None:
            await sender.send(event, stop)


async def produce(options: ProducerOptions, stop: asyncio.Event, out: IO[str] | None = None) -> Tally:
    """Open the options' site, give each of its places a sender, and produce until done; the site is closed after."""
    site = options.site()
    watchers: list[asyncio.Task[None]] = []
    try:
        if not await site.open(stop):
            return Tally()
        watchers = [asyncio.create_task(body, name=name) for name, body in site.watchers()]
        places = site.places()
        if options.endpoint.cluster:
            log.info("producing to %s shards of %s: %s", len(places), options.stream,
                     ", ".join(p.name for p in places))
        else:
            with suppress(RedisError, OSError):  # connect before the schedule; a Redis that is down shows in the sends
                await places[0].client.ping()
        senders = [Sender(p.client, replace(options, stream=p.name), out) for p in places]
        return await Producer(senders, options).run(stop)
    finally:
        await cancel_and_wait(watchers, WATCH_STOP_TIMEOUT_S)
        await site.aclose()


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="billing-producer",
        description="Write order.paid events to a Redis stream at a steady rate. Exits 1 when none of "
        "its sends was confirmed.",
        formatter_class=HelpFormatter,
    )
    add_connection_flags(p, on_cluster="write each event to the shard <stream>:{tag} its order_id routes to")
    p.add_argument("--stream", default="orders", help="stream to write")
    p.add_argument("--rate", type=float, default=50.0, help="events per second (0: as fast as possible)")
    p.add_argument("--count", type=int, default=None, help="stop after this many sends (default: until SIGINT)")
    p.add_argument("--maxlen", type=int, default=None, help="approximate MAXLEN ~ per XADD (default: no trim)")
    p.add_argument("--wait-replicas", type=int, default=0, help="WAIT for this many replicas after each XADD")
    p.add_argument("--wait-timeout-ms", type=int, default=1000, help="WAIT timeout")
    p.add_argument("--resend", type=int, default=0, metavar="N",
                   help="send an event whose attempt was unknown or refused again, same event_id, up to N more "
                   "times (0: never)")
    p.add_argument("--orders", type=int, default=100, help="distinct order_id values to spread events over")
    p.add_argument("--log", type=Path, default=None, help="one JSON line per attempt (see the module docstring)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING ...")
    return p


async def _amain(options: ProducerOptions) -> Tally:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    out = options.log.open("a", encoding="utf-8") if options.log else None
    try:
        tally = await produce(options, stop, out)
    finally:
        if out is not None:
            out.close()
    log.info("producer done: attempted=%s confirmed=%s unknown=%s refused=%s resent=%s", tally.attempted,
             tally.confirmed, tally.unknown, tally.refused, tally.resent)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if options.endpoint.cluster and (problem := cluster_stream_problem(options.stream)):
        parser.error(problem)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [producer] %(name)s: %(message)s",
    )
    if options.log:
        options.log.parent.mkdir(parents=True, exist_ok=True)
    try:
        tally = asyncio.run(_amain(options))
    except KeyboardInterrupt:  # a signal before the handlers were installed: nothing was sent
        return 0
    except InputError as exc:  # --cluster, or the shard registry it points at, is wrong
        log.error("cannot produce: %s", exc)
        return 2
    except (ValueError, RedisError) as exc:  # another shard count (ShardCountError), no cluster node answering
        log.error("cannot produce: %s", describe(exc))
        return 1
    if tally.attempted and not tally.confirmed:
        log.error("none of the %s sends was confirmed (see the warnings above, or --log)", tally.attempted)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
