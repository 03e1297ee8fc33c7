"""Lab 3's compact reference worker: one file, synchronous redis-py, the course's five steps.

``python labs/lab3/worker_reference.py --sentinel 127.0.0.1:26390 --stream orders ...`` takes
the lab's worker contract (flags, or ``BILLING_*`` environment variables; see
``labs/lab3/README.md``). It charges each event exactly once into the SQLite ledger (the
charge and its ``applied_events`` row in one transaction), acks only after the work,
reclaims stuck messages with XAUTOCLAIM, follows Sentinel through a failover and drains on
SIGTERM. ``labs/lab3/worker_starter.py`` is this file with the solution parts cut out
(``make kit``); the full reference is the ``solutions`` package (``billing-worker``).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import signal
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis
from redis.sentinel import Sentinel

log = logging.getLogger("worker")
SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount TEXT NOT NULL, msg_id TEXT NOT NULL, consumer TEXT NOT NULL,
    charged_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS applied_events (event_id TEXT PRIMARY KEY, msg_id TEXT NOT NULL,
    consumer TEXT NOT NULL, applied_at REAL NOT NULL);
"""
Message = tuple[str, dict[str, str]]


def flag(p: argparse.ArgumentParser, name: str, default: Any) -> None:
    """``--name``, defaulting to ``$BILLING_NAME`` and then to ``default``."""
    env = os.environ.get("BILLING_" + name.upper().replace("-", "_"))
    p.add_argument(f"--{name}", type=type(default), default=type(default)(env) if env else default)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Lab 3's compact billing worker")
    p.add_argument("--sentinel", action="append", default=[])
    for name, default in (("master-name", "mymaster"), ("stream", "orders"), ("group", "billing"),
                          ("consumer", f"worker-{os.getpid()}"), ("ledger", "ledger.sqlite3"),
                          ("handler-delay-ms", 50), ("fail-every", 7), ("min-idle-ms", 120_000),
                          ("claim-interval-ms", 30_000), ("block-ms", 2000), ("metrics-interval-s", 10.0)):
        flag(p, name, default)
    args, _ = p.parse_known_args()  # the other flags of the contract (--dedupe ...) are not used here
    env_sentinels = os.environ.get("BILLING_SENTINELS", "")
    args.sentinel = args.sentinel or [s for s in env_sentinels.split(",") if s]
    return args


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        sentinels = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in args.sentinel)]
        self.redis = Sentinel(sentinels, socket_timeout=1.0).master_for(  # type: ignore[no-untyped-call]
            args.master_name, socket_timeout=args.block_ms / 1000 + 3, decode_responses=True)
        Path(args.ledger).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(args.ledger, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self.attempts = itertools.count(1)
        self.counts = {"processed": 0, "errors": 0, "reclaimed": 0}
        self.stopping = False
        self.pool = ThreadPoolExecutor(8)

    def work(self, message: Message) -> bool:
        """The simulated work: ``handler_delay_ms``; every ``fail_every``-th attempt fails."""
        time.sleep(self.a.handler_delay_ms / 1000)
        return not (self.a.fail_every and next(self.attempts) % self.a.fail_every == 0)

    def read(self) -> list[Message]:
        """Step 1: the next new messages for this consumer (its failed ones come back through the rescuer)."""
        # region solution: XREADGROUP GROUP <group> <consumer> COUNT 16 BLOCK <block_ms> STREAMS <stream> >
        reply = self.redis.xreadgroup(self.a.group, self.a.consumer, {self.a.stream: ">"}, count=16,
                                      block=self.a.block_ms)
        return [(msg_id, fields) for _, messages in reply or [] for msg_id, fields in messages]
        # endregion

    def charge_once(self, msg_id: str, fields: dict[str, str]) -> None:
        """Step 1: the business effect exactly once, whatever the number of deliveries."""
        # region solution: ONE transaction: INSERT OR IGNORE applied_events; only if new, INSERT charges
        self.db.execute("BEGIN IMMEDIATE")
        try:
            new = self.db.execute("INSERT OR IGNORE INTO applied_events VALUES (?, ?, ?, ?)",
                                  (fields["event_id"], msg_id, self.a.consumer, time.time())).rowcount
            if new:
                self.db.execute("INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) "
                                "VALUES (?, ?, ?, ?, ?, ?)", (fields["event_id"], fields["order_id"],
                                                              fields["amount"], msg_id, self.a.consumer, time.time()))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        # endregion

    def handle(self, messages: list[Message]) -> None:
        """Work in parallel, then finish each success; a failure stays in the PEL for the rescuer."""
        for (msg_id, fields), ok in zip(messages, self.pool.map(self.work, messages), strict=True):
            if ok:
                self.finish(msg_id, fields)
                self.counts["processed"] += 1
            else:
                self.counts["errors"] += 1

    def finish(self, msg_id: str, fields: dict[str, str]) -> None:
        """The end of a successful delivery: the charge and the acknowledgement."""
        # region solution: charge, THEN XACK: an ack before the charge loses the event if the process dies
        self.charge_once(msg_id, fields)
        self.redis.xack(self.a.stream, self.a.group, msg_id)
        # endregion

    def rescue(self) -> None:
        """Step 2: take over messages idle for ``min_idle_ms`` in anyone's PEL, and handle them."""
        # region solution: XAUTOCLAIM stream group consumer min_idle_ms 0-0 COUNT 100; handle what it took
        _, claimed, *_ = self.redis.xautoclaim(self.a.stream, self.a.group, self.a.consumer,
                                               self.a.min_idle_ms, "0-0", count=100)
        for msg_id, _fields in claimed:
            log.info("reclaim: %s took %s", self.a.consumer, msg_id)
        self.counts["reclaimed"] += len(claimed)
        self.handle([(i, f) for i, f in claimed if f])
        # endregion

    def run(self) -> None:
        """Steps 3-5: loop until SIGTERM, survive errors (failover), drain, log ``drain complete``."""
        # region solution: on SIGTERM/SIGINT set self.stopping; the loop then finishes the batch in hand and exits
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
        # endregion
        with_group(self.redis, self.a.stream, self.a.group)
        next_rescue = next_metrics = time.monotonic()
        while not self.stopping:
            try:
                self.handle(self.read())
                if time.monotonic() >= next_rescue:
                    next_rescue = time.monotonic() + self.a.claim_interval_ms / 1000
                    self.rescue()
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
                log.warning("redis error, retrying: %r", exc)  # Sentinel names the new master on reconnect
                time.sleep(0.5)
            if time.monotonic() >= next_metrics:
                next_metrics = time.monotonic() + self.a.metrics_interval_s
                log.info("metrics %s", " ".join(f"{k}={v}" for k, v in self.counts.items()))
        self.pool.shutdown(wait=True)
        log.info("drain complete: %s", " ".join(f"{k}={v}" for k, v in self.counts.items()))


def with_group(client: redis.Redis, stream: str, group: str) -> None:
    """``XGROUP CREATE <stream> <group> 0 MKSTREAM``; BUSYGROUP means it exists already."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s [{args.consumer}] %(message)s")
    Worker(args).run()


if __name__ == "__main__":
    main()
