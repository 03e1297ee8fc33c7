"""``billing-producer``: order events at a steady rate (also ``python -m solutions.producer``).

Each event gets a unique ``event_id``. With ``--wait-replicas N`` every ``XADD`` is followed
by ``WAIT N timeout`` on the same connection (one pipeline), and the send counts as
*confirmed* only when at least N replicas acknowledged it; otherwise, or when the XADD
itself failed with a connection error, its outcome is *unknown* (it may or may not be in
the stream). ``--log PATH`` gets one JSON line per send: ``event_id``, ``msg_id``,
``time``, ``status`` (``confirmed`` / ``unknown``), ``order_id``, ``amount``, ``replicas``.
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

from solutions.cli import HelpFormatter, Parser, address, redis_url
from solutions.connection import Backoff, Client, Streak, connect
from solutions.failover_watch import FailoverWatch
from solutions.settings import DEFAULT_REDIS_URL, SOCKET_MARGIN_S, env_default

log = logging.getLogger("solutions.producer")


@dataclass
class Tally:
    attempted: int = 0
    confirmed: int = 0
    unknown: int = 0


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

    async def send(self, event: dict[str, str]) -> None:
        """``XADD stream [MAXLEN ~ n] * fields`` then, if asked, ``WAIT n timeout``: one pipeline."""
        a = self.args
        self.tally.attempted += 1
        msg_id: str | None = None
        replicas: int | None = None
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xadd(a.stream, event, maxlen=a.maxlen, approximate=True)  # type: ignore[arg-type]
                if a.wait_replicas:
                    pipe.wait(a.wait_replicas, a.wait_timeout_ms)
                replies: list[Any] = await pipe.execute()
            raw_id = replies[0]
            msg_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            replicas = int(replies[1]) if a.wait_replicas else None
            self.backoff.reset()
            self.streak.recovered()
        except Exception as exc:  # each send's outcome is in --log; stderr gets one line per streak
            self.streak.failed(exc)
            await self.backoff.sleep()
        ok = msg_id is not None and (not a.wait_replicas or (replicas or 0) >= a.wait_replicas)
        if ok:
            self.tally.confirmed += 1
        else:
            self.tally.unknown += 1
        self._log(event, msg_id, "confirmed" if ok else "unknown", replicas)

    def _log(self, event: dict[str, str], msg_id: str | None, status: str, replicas: int | None) -> None:
        if self.out is None:
            return
        record = {
            "event_id": event["event_id"],
            "msg_id": msg_id,
            "time": time.time(),
            "status": status,
            "order_id": event["order_id"],
            "amount": event["amount"],
            "replicas": replicas,
        }
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    async def run(self, stop: asyncio.Event) -> Tally:
        """Send at ``--rate`` per second until ``--count`` sends or ``stop``."""
        a = self.args
        interval_s = 1.0 / a.rate if a.rate > 0 else 0.0
        started = time.monotonic()
        while not stop.is_set() and (a.count is None or self.tally.attempted < a.count):
            await self.send(make_event(a.orders))
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
    p.add_argument("--stream", default="orders", help="stream to write")
    p.add_argument("--rate", type=float, default=50.0, help="events per second (0: as fast as possible)")
    p.add_argument("--count", type=int, default=None, help="stop after this many sends (default: until SIGINT)")
    p.add_argument("--maxlen", type=int, default=None, help="approximate MAXLEN ~ per XADD (default: no trim)")
    p.add_argument("--wait-replicas", type=int, default=0, help="WAIT for this many replicas after each XADD")
    p.add_argument("--wait-timeout-ms", type=int, default=1000, help="WAIT timeout")
    p.add_argument("--orders", type=int, default=100, help="distinct order_id values to spread events over")
    p.add_argument("--log", type=Path, default=None, help="one JSON line per send (confirmed or unknown)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING ...")
    return p


async def _amain(args: argparse.Namespace) -> Tally:
    sentinels = tuple(args.sentinel or ())
    wait_s = args.wait_timeout_ms / 1000 if args.wait_replicas else 0.0
    client = connect(redis_url=args.redis_url, sentinels=sentinels, master_name=args.master_name,
                     socket_timeout_s=wait_s + SOCKET_MARGIN_S)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    out = args.log.open("a", encoding="utf-8") if args.log else None
    watch = asyncio.create_task(FailoverWatch(client, sentinels, args.master_name).run(), name="failover-watch")
    try:
        with suppress(Exception):  # connect before the schedule starts; a Redis that is down shows in the sends
            await client.ping()
        tally = await Producer(client, args, out).run(stop)
    finally:
        watch.cancel()
        with suppress(asyncio.CancelledError):
            await watch
        if out is not None:
            out.close()
        await client.aclose()
    log.info("producer done: attempted=%s confirmed=%s unknown=%s", tally.attempted, tally.confirmed, tally.unknown)
    return tally


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.maxlen is not None and args.maxlen <= 0:
        build_parser().error("--maxlen must be > 0 (leave it out for no trimming)")
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
    if tally.attempted and not tally.confirmed:
        log.error("none of the %s sends was confirmed (see the warnings above, or --log)", tally.attempted)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
