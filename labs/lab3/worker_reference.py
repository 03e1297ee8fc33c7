"""Lab 3's compact reference worker: one file, synchronous redis-py, the course's five steps.

``python labs/lab3/worker_reference.py --sentinel 127.0.0.1:26390 --stream orders ...`` takes
the lab's worker contract (flags, or ``BILLING_*`` environment variables; see
``labs/lab3/README.md``). It reads with XREADGROUP, charges each event into the SQLite
ledger under the dedupe strategy it is given (``none``, ``redis``: the course's SET NX
marker, ``sqlite``: the charge and its ``applied_events`` row in one transaction), acks only
after the charge, reclaims stuck messages with XAUTOCLAIM (dead-lettering those delivered
more than ``--max-attempts`` times), follows Sentinel through a failover and drains on
SIGTERM. ``labs/lab3/worker_starter.py`` is this file with the solution parts cut out
(``make kit``).

The full reference is the ``solutions`` package (``billing-worker``): asyncio, batched
commits and acks, per-order ordering, the two-phase Redis strategy, metrics. Both pass the
same checks (``tests/test_check_lab3.py`` runs this one beside the probe workers); this one
keeps each step short enough to read at once, so it handles one batch at a time and has no
``redis-2phase``.
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
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import redis
from redis.sentinel import Sentinel

log = logging.getLogger("worker")
SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount TEXT NOT NULL, msg_id TEXT NOT NULL, consumer TEXT NOT NULL,
    charged_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS applied_events (event_id TEXT PRIMARY KEY) WITHOUT ROWID;
"""
# XACK the original; only if it was still pending, XADD its dead letter (one atomic step).
DEAD_LETTER_LUA = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3)) end
return acked
"""
FIELDS = ("type", "order_id", "amount", "event_id")
Message = tuple[str, dict[str, str]]


def flag(p: argparse.ArgumentParser, name: str, default: Any) -> None:
    """``--name``, defaulting to ``$BILLING_NAME`` and then to ``default``."""
    env = os.environ.get("BILLING_" + name.upper().replace("-", "_"))
    p.add_argument(f"--{name}", type=type(default), default=type(default)(env) if env else default)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Lab 3's compact billing worker")
    p.add_argument("--sentinel", action="append", default=[])
    for name, default in (("master-name", "mymaster"), ("stream", "orders"), ("group", "billing"),
                          ("consumer", f"worker-{os.getpid()}"), ("ledger", "ledger.sqlite3"), ("dedupe", "sqlite"),
                          ("handler-delay-ms", 50), ("fail-every", 7), ("max-attempts", 5), ("min-idle-ms", 120_000),
                          ("claim-interval-ms", 30_000), ("block-ms", 2000), ("drain-timeout-s", 30.0),
                          ("metrics-interval-s", 10.0), ("dedupe-ttl-s", 7 * 24 * 3600)):
        flag(p, name, default)
    args, _ = p.parse_known_args()  # flags of the full worker that this one does not have are ignored
    env_sentinels = os.environ.get("BILLING_SENTINELS", "")
    args.sentinel = args.sentinel or [s for s in env_sentinels.split(",") if s]
    if args.dedupe not in ("none", "redis", "sqlite"):
        p.error(f"--dedupe {args.dedupe}: this compact worker has none, redis and sqlite")
    return args


def marker_key(stream: str, group: str, event_id: str) -> str:
    """The ``redis`` strategy's key: one per business event, whatever the stream entry carrying it."""
    return f"processed:{stream}:{group}:{event_id}"


def dead_letter_fields(msg_id: str, fields: dict[str, str], error: str, attempts: int) -> dict[str, str]:
    """A dead letter: the original fields plus ``id`` (the original entry's), ``error`` and ``attempts``."""
    return {**fields, "id": msg_id, "error": error, "attempts": str(attempts)}


def malformed(fields: dict[str, str]) -> str | None:
    """Why a message can never be charged (it goes to the DLQ at once), or None."""
    missing = [name for name in FIELDS if not fields.get(name)]
    if missing:
        return f"permanent: missing {', '.join(missing)}"
    try:
        ok = Decimal(fields["amount"]) > 0
    except InvalidOperation:
        ok = False
    return None if ok else f"permanent: bad amount {fields['amount']!r}"


def open_ledger(path: str, timeout_s: float = 30.0) -> sqlite3.Connection:
    """The ledger, in WAL mode, with its tables. When two workers open a new ledger at the same moment, one
    of them may get "database is locked" from the switch to WAL at once, whatever the timeout (SQLite does
    not wait there): the switch is tried again until ``timeout_s``."""
    db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            return db
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(0.05)


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        sentinels = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in args.sentinel)]
        self.redis = Sentinel(sentinels, socket_timeout=1.0).master_for(  # type: ignore[no-untyped-call]  # redis-py: unannotated
            args.master_name, socket_timeout=args.block_ms / 1000 + 3, decode_responses=True)
        self.dead_letter_script = self.redis.register_script(DEAD_LETTER_LUA)
        Path(args.ledger).parent.mkdir(parents=True, exist_ok=True)
        self.db = open_ledger(args.ledger)
        self.attempts = itertools.count(1)
        self.counts = {"processed": 0, "errors": 0, "duplicates": 0, "dead_lettered": 0, "reclaimed": 0}
        self.stopping = False
        self.stopped_at: float | None = None  # when SIGTERM came: the drain's clock
        self.pool = ThreadPoolExecutor(8)

    def work(self, message: Message) -> bool:
        """The simulated work: ``handler_delay_ms``; every ``fail_every``-th attempt of this process fails."""
        time.sleep(self.a.handler_delay_ms / 1000)
        return not (self.a.fail_every and next(self.attempts) % self.a.fail_every == 0)

    def marker(self, fields: dict[str, str]) -> str:
        return marker_key(self.a.stream, self.a.group, fields["event_id"])

    def read(self) -> list[Message]:
        """Step 1: the next new messages for this consumer (its failed ones come back through the rescuer)."""
        # region solution: XREADGROUP GROUP <group> <consumer> COUNT 16 BLOCK <block_ms> STREAMS <stream> >
        reply = self.redis.xreadgroup(self.a.group, self.a.consumer, {self.a.stream: ">"}, count=16,
                                      block=self.a.block_ms)
        return [(msg_id, fields) for _, messages in reply or [] for msg_id, fields in messages]
        # endregion

    def begin(self, fields: dict[str, str]) -> bool:
        """Before the work: False when the event was done already (``redis``: its marker exists)."""
        # region solution: redis: SET <marker> 1 NX EX <dedupe_ttl_s>, True if it was set; other strategies: True
        if self.a.dedupe != "redis":
            return True
        return bool(self.redis.set(self.marker(fields), 1, nx=True, ex=self.a.dedupe_ttl_s))
        # endregion

    def abort(self, fields: dict[str, str]) -> None:
        """The work failed: undo what :meth:`begin` recorded, so the redelivery does the work."""
        # region solution: redis: DEL <marker>
        if self.a.dedupe == "redis":
            self.redis.delete(self.marker(fields))
        # endregion

    def charge(self, msg_id: str, fields: dict[str, str]) -> None:
        """Step 1: the business effect; with ``sqlite`` exactly once, whatever the number of deliveries."""
        # region solution: sqlite: ONE transaction: INSERT OR IGNORE applied_events, only if new INSERT charges
        row = (fields["event_id"], fields["order_id"], fields["amount"], msg_id, self.a.consumer, time.time())
        insert = "INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) VALUES (?,?,?,?,?,?)"
        self.db.execute("BEGIN IMMEDIATE")
        try:
            new = self.a.dedupe != "sqlite" or self.db.execute(
                "INSERT OR IGNORE INTO applied_events(event_id) VALUES (?)", (fields["event_id"],)).rowcount
            if new:
                self.db.execute(insert, row)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        # endregion

    def handle(self, messages: list[Message]) -> None:
        """Dead-letter the malformed, skip the done, work the rest in parallel, finish each success."""
        todo = []
        for msg_id, fields in messages:
            if problem := malformed(fields):
                self.dead_letter(msg_id, fields, problem, 1)
            elif self.begin(fields):
                todo.append((msg_id, fields))
            else:
                self.redis.xack(self.a.stream, self.a.group, msg_id)  # a duplicate: done before, ack it
                self.counts["duplicates"] += 1
        for (msg_id, fields), ok in zip(todo, self.pool.map(self.work, todo), strict=True):
            if self.drain_overdue():
                break  # over the drain budget: the rest is neither charged nor acked, it stays pending
            if ok:
                self.finish(msg_id, fields)
                self.counts["processed"] += 1
            else:
                self.abort(fields)
                self.counts["errors"] += 1  # no XACK: it stays pending for the rescuer

    def finish(self, msg_id: str, fields: dict[str, str]) -> None:
        """The end of a successful delivery: the charge and the acknowledgement."""
        # region solution: charge, THEN XACK: an ack before the charge loses the event if the process dies
        self.charge(msg_id, fields)
        self.redis.xack(self.a.stream, self.a.group, msg_id)
        # endregion

    def dead_letter(self, msg_id: str, fields: dict[str, str], error: str, attempts: int) -> None:
        """Move a message to ``<stream>:dlq``: its fields plus ``id``, ``error``, ``attempts``; XACK the original."""
        # region solution: one script: XACK the original, and only if it was pending XADD the dead letter
        flat = [part for item in dead_letter_fields(msg_id, fields, error, attempts).items() for part in item]
        if self.dead_letter_script(keys=[self.a.stream, f"{self.a.stream}:dlq"], args=[self.a.group, msg_id, *flat]):
            self.counts["dead_lettered"] += 1
            log.warning("dead-lettered %s after %s deliveries: %s", msg_id, attempts, error)
        # endregion

    def rescue(self) -> None:
        """Step 2: take over messages idle for ``min_idle_ms`` in anyone's PEL; give up on the hopeless.

        redis-py's ``xautoclaim(...)`` returns ``[next cursor, [(id, fields), ...], [deleted ids]]``;
        an entry deleted meanwhile comes back with empty fields. The delivery count of the claimed
        IDs is ``times_delivered`` in ``xpending_range(stream, group, min=<first id>, max=<last id>,
        count=<n>, consumername=<this consumer>)``, and it already counts this claim. A claimed
        message that fails again is NOT acked: it stays pending for the next rescue (a rescuer
        that acks failed work loses it, whatever the course text's short version does).
        """
        # region solution: XAUTOCLAIM ... min_idle_ms 0-0 COUNT 100; deliveries from XPENDING; > max_attempts: DLQ
        _, claimed, *_ = self.redis.xautoclaim(self.a.stream, self.a.group, self.a.consumer,
                                               self.a.min_idle_ms, "0-0", count=100)
        claimed = [(i, f) for i, f in claimed if f]  # an entry deleted meanwhile has no fields left
        if not claimed:
            return
        self.counts["reclaimed"] += len(claimed)
        rows = self.redis.xpending_range(self.a.stream, self.a.group, min=claimed[0][0], max=claimed[-1][0],
                                         count=len(claimed), consumername=self.a.consumer)
        deliveries = {r["message_id"]: r["times_delivered"] for r in rows}
        retry = []
        for msg_id, fields in claimed:
            count = deliveries.get(msg_id, 1)
            if count > self.a.max_attempts:
                self.dead_letter(msg_id, fields, f"gave up: delivered {count} times", count)
            else:
                retry.append((msg_id, fields))
        log.info("reclaim: %s took %s messages", self.a.consumer, len(claimed))
        self.handle(retry)
        # endregion

    def run(self) -> None:
        """Steps 3-5: loop until SIGTERM, survive errors (failover), drain, log ``drain complete``."""
        # region solution: on SIGTERM/SIGINT call self.stop(); the loop then finishes the batch in hand and exits
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())
        # endregion
        with_group(self.redis, self.a.stream, self.a.group)
        next_rescue = next_metrics = time.monotonic()
        while not self.stopping:
            try:
                self.handle(self.read())  # the batch in hand finishes, even after SIGTERM: that is the drain
                if time.monotonic() >= next_rescue and not self.stopping:  # no reclaiming once stopping
                    next_rescue = time.monotonic() + self.a.claim_interval_ms / 1000
                    self.rescue()
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
                log.warning("redis error, retrying: %r", exc)  # Sentinel names the new master on reconnect
                time.sleep(0.5)
            if time.monotonic() >= next_metrics:
                next_metrics = time.monotonic() + self.a.metrics_interval_s
                log.info("metrics %s", " ".join(f"{k}={v}" for k, v in self.counts.items()))
        over = self.drain_overdue()
        self.pool.shutdown(wait=not over, cancel_futures=True)
        left = f" (over --drain-timeout-s {self.a.drain_timeout_s:g}: the rest left pending)" if over else ""
        log.info("drain complete%s: %s", left, " ".join(f"{k}={v}" for k, v in self.counts.items()))

    def stop(self) -> None:
        """SIGTERM/SIGINT: stop reading; the batch in hand finishes within ``drain_timeout_s``."""
        if not self.stopping:
            self.stopped_at = time.monotonic()
        self.stopping = True

    def drain_overdue(self) -> bool:
        """True once the drain has run past ``drain_timeout_s``: what is not finished stays pending."""
        return self.stopped_at is not None and time.monotonic() - self.stopped_at > self.a.drain_timeout_s


def with_group(client: redis.Redis, stream: str, group: str) -> None:
    """``XGROUP CREATE <stream> <group> 0 MKSTREAM``; BUSYGROUP means it exists already."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if not str(exc).startswith("BUSYGROUP"):
            raise


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s [{args.consumer}] %(message)s")
    Worker(args).run()


if __name__ == "__main__":
    main()
