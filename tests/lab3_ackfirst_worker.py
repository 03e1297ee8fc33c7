"""A BROKEN billing worker for the lab-3 checker's tests: it XACKs each message before the work.

It follows lab 3's worker contract (the same flags as ``billing-worker``; unknown ones are
ignored) and writes the same ledger, so the only thing wrong with it is the order: ack,
then work. When the work fails (every ``--fail-every``-th attempt) the message is already
acknowledged, nobody redelivers it, and the event is lost. ``make check-lab-3`` must say so.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import time
from pathlib import Path

import redis
from redis.sentinel import Sentinel

SCHEMA = """CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL,
order_id TEXT NOT NULL, amount TEXT NOT NULL, msg_id TEXT NOT NULL, consumer TEXT NOT NULL, charged_at REAL NOT NULL)"""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--sentinel", action="append", default=[])
    p.add_argument("--master-name", default="mymaster")
    p.add_argument("--stream", default="orders")
    p.add_argument("--group", default="billing")
    p.add_argument("--consumer", default="ackfirst")
    p.add_argument("--ledger", type=Path, default=Path("ledger.sqlite3"))
    p.add_argument("--handler-delay-ms", type=int, default=50)
    p.add_argument("--fail-every", type=int, default=7)
    args, _ = p.parse_known_args()
    return args


def main() -> None:
    args = parse()
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    sentinels = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in args.sentinel)]
    client = Sentinel(sentinels, socket_timeout=1.0).master_for(args.master_name, socket_timeout=3.0,
                                                                decode_responses=True)
    db = sqlite3.connect(args.ledger, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(SCHEMA)
    attempts = 0
    while not stop:
        try:
            reply = client.xreadgroup(args.group, args.consumer, {args.stream: ">"}, count=10, block=500)
        except redis.RedisError:
            time.sleep(0.2)
            continue
        for _, messages in reply or []:
            for msg_id, fields in messages:
                client.xack(args.stream, args.group, msg_id)  # THE BUG: acknowledged before the work
                time.sleep(args.handler_delay_ms / 1000)
                attempts += 1
                if args.fail_every and attempts % args.fail_every == 0:
                    continue  # the work failed, and nobody will ever see this message again
                db.execute(
                    "INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) "
                    "VALUES (?,?,?,?,?,?)",
                    (fields["event_id"], fields["order_id"], fields["amount"], msg_id, args.consumer, time.time()),
                )
    print("drain complete (ack-first worker)", flush=True)


if __name__ == "__main__":
    main()
