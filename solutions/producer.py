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

Where events go: one stream by URL or Sentinel, or with ``--cluster HOST:PORT --shards N`` the
shards of a stream on Redis Cluster. The shards are the registered set
(:func:`solutions.shards.ensure_shards`: the first producer or worker plans and stores them;
another N is refused with one clear line), and an event goes to shard ``shard_of(order_id, N)``,
so every event of an order lands in one shard, in the order it was made: per-key order starts
here. Either way one :class:`Producer` makes the events on one schedule and hands each to the
:class:`~solutions.sender.Sender` of its stream. With several shards each sender has a queue of
its own: a shard whose master is dead makes only its own events wait (and re-sends them with
backoff and the same ``event_id``), while the other shards are sent on schedule.

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
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from pathlib import Path
from typing import IO

from redis.exceptions import RedisError

from solutions.cancelling import cancel_and_wait
from solutions.cli import HelpFormatter, Parser, address, cluster_stream_problem, env_addresses, redis_url
from solutions.cluster_router import ClusterRouter, RoutingOptions
from solutions.connection import connect, describe
from solutions.failover_watch import FailoverWatch
from solutions.sender import CONFIRMED, REFUSED, UNKNOWN, Outcome, Sender, Tally, make_event
from solutions.settings import DEFAULT_REDIS_URL, MAX_SHARDS, SOCKET_MARGIN_S, InputError, env_default
from solutions.shards import ensure_shards, shard_of

log = logging.getLogger("solutions.producer")
WATCH_STOP_TIMEOUT_S = 5.0  # the failover or slot-map watch at exit (solutions.cancelling)

__all__ = ["CONFIRMED", "REFUSED", "UNKNOWN", "Outcome", "Producer", "Sender", "Tally", "build_parser", "main",
           "make_event"]

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
    """``--rate`` events a second, each to the sender of its stream: one, or one per shard (``route``)."""

    def __init__(self, senders: list[Sender], args: argparse.Namespace,
                 route: Callable[[Event], int] | None = None) -> None:
        if not senders:
            raise ValueError("a producer needs at least one sender")
        self.senders = senders
        self.args = args
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
        """Make events on schedule until ``--count`` or ``stop``; each sender then sends what it holds.

        One sender sends each event before the next is made (a re-send delays the schedule, which
        catches up after); several send from queues of their own, so that a dead shard holds up
        only its own events.
        """
        a = self.args
        if len(self.senders) == 1:
            (sender,) = self.senders
            async for _ in schedule(a.rate, a.count, stop):
                await sender.send(make_event(a.orders), stop)
            return self.tally
        self._queues = [asyncio.Queue() for _ in self.senders]
        sending = [asyncio.create_task(self._send(i, stop)) for i in range(len(self.senders))]
        async for _ in schedule(a.rate, a.count, stop):
            event = make_event(a.orders)
            self._queues[self.route(event)].put_nowait(event)
        for queue in self._queues:
            queue.put_nowait(None)
        await asyncio.gather(*sending)
        return self.tally

    async def _send(self, index: int, stop: asyncio.Event) -> None:
        sender, queue = self.senders[index], self._queues[index]
        while (event := await queue.get()) is not None:
            await sender.send(event, stop)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="billing-producer",
        description="Write order.paid events to a Redis stream at a steady rate. Exits 1 when none of "
        "its sends was confirmed.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--redis-url", default=env_default("redis-url", DEFAULT_REDIS_URL), type=redis_url,
                   help="plain Redis")
    p.add_argument(
        "--sentinel",
        action="append",
        type=address,
        metavar="HOST:PORT",
        help="connect through this Sentinel instead (repeatable)",
    )
    p.add_argument("--master-name", default="mymaster", help="the master's name in Sentinel")
    p.add_argument("--cluster", action="append", type=address, metavar="HOST:PORT",
                   help="a node of a Redis Cluster (repeatable; BILLING_CLUSTER=H:P,H:P): write each event to the "
                   "shard <stream>:{tag} its order_id routes to")
    p.add_argument("--shards", type=int, default=env_default("shards", "") or None,
                   help="with --cluster: the stream's number of shards, fixed for its life (default: as registered)")
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


async def _amain(args: argparse.Namespace) -> Tally:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    out = args.log.open("a", encoding="utf-8") if args.log else None
    try:
        if args.cluster:
            tally = await _to_cluster(args, stop, out)
        else:
            tally = await _to_one_stream(args, stop, out)
    finally:
        if out is not None:
            out.close()
    log.info("producer done: attempted=%s confirmed=%s unknown=%s refused=%s resent=%s", tally.attempted,
             tally.confirmed, tally.unknown, tally.refused, tally.resent)
    return tally


async def _to_one_stream(args: argparse.Namespace, stop: asyncio.Event, out: IO[str] | None) -> Tally:
    """To a plain Redis, or through Sentinel (connections to a replaced master dropped on +switch-master)."""
    sentinels = tuple(args.sentinel or ())
    wait_s = args.wait_timeout_ms / 1000 if args.wait_replicas else 0.0
    client = connect(redis_url=args.redis_url, sentinels=sentinels, master_name=args.master_name,
                     socket_timeout_s=wait_s + SOCKET_MARGIN_S)
    watch = asyncio.create_task(FailoverWatch(client, sentinels, args.master_name).run(), name="failover-watch")
    try:
        with suppress(RedisError, OSError):  # connect before the schedule; a Redis that is down shows in the sends
            await client.ping()
        return await Producer([Sender(client, args, out)], args).run(stop)
    finally:
        await cancel_and_wait([watch], WATCH_STOP_TIMEOUT_S)
        await client.aclose()


def routing_options(args: argparse.Namespace) -> RoutingOptions:
    """No retries inside the client (the producer's own re-sends are logged), a socket timeout above WAIT's."""
    wait_s = args.wait_timeout_ms / 1000 if args.wait_replicas else 0.0
    return RoutingOptions(socket_timeout_s=wait_s + SOCKET_MARGIN_S, retry_for_s=0.0)


async def _to_cluster(args: argparse.Namespace, stop: asyncio.Event, out: IO[str] | None) -> Tally:
    """Connect, find (or register) the shard set, and produce until done; the router is closed after."""
    router = await ClusterRouter.connect(args.cluster, routing_options(args))
    watch = asyncio.create_task(router.watch(), name="cluster-watch")
    try:
        shards = await ensure_shards(router, args.stream, args.shards)
        log.info("producing to %s shards of %s: %s", len(shards), args.stream, ", ".join(shards.names))
        senders = [Sender(router.client(name), argparse.Namespace(**{**vars(args), "stream": name}), out)
                   for name in shards.names]
        return await Producer(senders, args).run(stop)
    finally:
        await cancel_and_wait([watch], WATCH_STOP_TIMEOUT_S)
        await router.aclose()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.cluster = args.cluster or env_addresses("cluster")
    except ValueError as exc:
        build_parser().error(f"BILLING_CLUSTER: {exc}")
    if args.maxlen is not None and args.maxlen <= 0:
        build_parser().error("--maxlen must be > 0 (leave it out for no trimming)")
    if args.resend < 0:
        build_parser().error("--resend must be >= 0")
    if args.shards is not None and (not 1 <= args.shards <= MAX_SHARDS or not args.cluster):
        build_parser().error(f"--shards needs --cluster and must be 1 to {MAX_SHARDS} (a cluster slot per shard)")
    if args.cluster and (problem := cluster_stream_problem(args.stream)):
        build_parser().error(problem)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [producer] %(name)s: %(message)s",
    )
    if args.log:
        args.log.parent.mkdir(parents=True, exist_ok=True)
    try:
        tally = asyncio.run(_amain(args))
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
