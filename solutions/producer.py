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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import signal
import sys
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from redis.exceptions import BusyLoadingError, RedisError, ResponseError

from solutions.cli import HelpFormatter, Parser, address, cluster_stream_problem, env_addresses, redis_url
from solutions.connection import Backoff, Client, Streak, connect, describe
from solutions.failover_watch import FailoverWatch
from solutions.settings import DEFAULT_REDIS_URL, MAX_SHARDS, SOCKET_MARGIN_S, InputError, env_default

log = logging.getLogger("solutions.producer")


CONFIRMED, UNKNOWN, REFUSED = "confirmed", "unknown", "refused"


@dataclass
class Tally:
    """Events by outcome (each event counted once, by its best attempt), and re-sent attempts."""

    attempted: int = 0
    confirmed: int = 0
    unknown: int = 0
    refused: int = 0
    resent: int = 0


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: its status, the id and replica count Redis gave, and why if not confirmed."""

    status: str
    msg_id: str | None = None
    replicas: int | None = None
    error: str | None = None


def make_event(order_count: int) -> dict[str, str]:
    """One ``order.paid`` event with a fresh ``event_id``."""
    cents = random.randint(100, 99_999)
    return {
        "type": "order.paid",
        "order_id": f"order-{random.randrange(order_count)}",
        "amount": f"{cents // 100}.{cents % 100:02d}",
        "event_id": uuid.uuid4().hex,
        "produced_at_ms": str(int(time.time() * 1000)),
    }


class Producer:
    """Sends events with ``XADD`` (+ ``WAIT``) and logs each outcome."""

    def __init__(self, client: Client, args: argparse.Namespace, out: IO[str] | None) -> None:
        self.client = client
        self.args = args
        self.out = out
        self.tally = Tally()
        self.backoff = Backoff(base_s=0.05, cap_s=1.0)
        self.streak = Streak(log, "XADD")

    async def send(self, event: dict[str, str], stop: asyncio.Event | None = None) -> str:
        """Send one event: a first attempt, then up to ``--resend`` re-sends until one is confirmed.

        Returns the event's outcome (``confirmed``, ``refused`` when every attempt was refused,
        else ``unknown``). Every attempt is logged.
        """
        statuses: list[str] = []
        for attempt in range(1, self.args.resend + 2):
            if attempt > 1:
                if stop is not None and stop.is_set():
                    break
                self.tally.resent += 1
            outcome = await self.attempt(event)
            statuses.append(outcome.status)
            self._log(event, attempt, outcome)
            if outcome.status == CONFIRMED:
                self.backoff.reset()
                break
            await self.backoff.sleep()
        final = CONFIRMED if CONFIRMED in statuses else REFUSED if set(statuses) == {REFUSED} else UNKNOWN
        self.tally.attempted += 1
        setattr(self.tally, final, getattr(self.tally, final) + 1)
        return final

    async def attempt(self, event: dict[str, str]) -> Outcome:
        """``XADD stream [MAXLEN ~ n] * fields`` then, if asked, ``WAIT n timeout``: one pipeline, one outcome."""
        a = self.args
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xadd(a.stream, event, maxlen=a.maxlen, approximate=True)  # type: ignore[arg-type]
                if a.wait_replicas:
                    pipe.wait(a.wait_replicas, a.wait_timeout_ms)
                replies: list[Any] = await pipe.execute(raise_on_error=False)
        except BusyLoadingError as exc:  # a -LOADING reply: the XADD was not executed
            self.streak.failed(exc)
            return Outcome(REFUSED, error=describe(exc))
        except (RedisError, OSError) as exc:  # connection lost, timeout, no master: the XADD may have landed
            self.streak.failed(exc)  # each attempt's outcome is in --log; stderr gets one line per streak
            return Outcome(UNKNOWN, error=describe(exc))
        if isinstance(replies[0], ResponseError):  # OOM, READONLY ...: Redis did not write the entry
            self.streak.failed(replies[0])
            return Outcome(REFUSED, error=describe(replies[0]))
        self.streak.recovered()
        raw_id = replies[0]
        msg_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        if not a.wait_replicas:
            return Outcome(CONFIRMED, msg_id)
        replicas = None if isinstance(replies[1], Exception) else int(replies[1])
        if replicas is not None and replicas >= a.wait_replicas:
            return Outcome(CONFIRMED, msg_id, replicas)
        why = describe(replies[1]) if replicas is None else f"WAIT: {replicas} of {a.wait_replicas} replicas acked"
        return Outcome(UNKNOWN, msg_id, replicas, why)

    def _log(self, event: dict[str, str], attempt: int, outcome: Outcome) -> None:
        if self.out is None:
            return
        record = {
            "event_id": event["event_id"],
            "attempt": attempt,
            "status": outcome.status,
            "msg_id": outcome.msg_id,
            "replicas": outcome.replicas,
            "error": outcome.error,
            "time": time.time(),
            "order_id": event["order_id"],
            "amount": event["amount"],
        }
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    async def run(self, stop: asyncio.Event) -> Tally:
        """Send at ``--rate`` per second until ``--count`` sends or ``stop``."""
        a = self.args
        interval_s = 1.0 / a.rate if a.rate > 0 else 0.0
        started = time.monotonic()
        while not stop.is_set() and (a.count is None or self.tally.attempted < a.count):
            await self.send(make_event(a.orders), stop)
            if interval_s:
                delay_s = started + self.tally.attempted * interval_s - time.monotonic()
                if delay_s > 0:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), delay_s)
            else:
                await asyncio.sleep(0)
        return self.tally


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
                   "shard <stream>:{tag} its order_id routes to (solutions.shard_producer)")
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
            from solutions.shard_producer import run_on_cluster  # the cluster router only when asked

            tally = await run_on_cluster(args, stop, out)
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
        return await Producer(client, args, out).run(stop)
    finally:
        watch.cancel()
        with suppress(asyncio.CancelledError):
            await watch
        await client.aclose()


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
