"""Idempotency side by side (course module 3, section 3.2): each case is a real run that counts effects.

Cases 1-5 and 8 run the course's ``IdempotentHandler`` transcribed to plain redis-py
(:class:`CourseMarker`: ``SET key 1 NX PX ttl``, the work, ``DEL`` on failure) with the
effects counted in a Python :class:`~collections.Counter` that stands for the business
database. Cases 6 and 7 run the reference worker (``solutions``) with ``redis-2phase`` and
``sqlite`` through a ``kill -9`` (see :mod:`labs.experiments.worker_crash`).

Every case handles one business event (``event_id``); a :class:`Case` counts how many times
its effect happened: 1 is right, 2 is a duplicate, 0 is lost work.

Tests in ``tests/test_idempotency_cases.py``.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from labs import replies
from labs.experiments.read_loop import GROUP, fresh_group
from labs.launcher import binaries, ports
from labs.launcher.process import RedisProcess, command
from labs.polling import wait_until


@dataclass(frozen=True)
class Case:
    """One row of the table: how many times one event's effect happened."""

    number: int
    name: str
    strategy: str
    scenario: str
    effects: int

    @property
    def duplicates(self) -> int:
        return max(0, self.effects - 1)

    @property
    def lost(self) -> int:
        return 1 if self.effects == 0 else 0


class CourseMarker:
    """The course's handler in Python: a ``SET NX`` marker with a TTL, then the work."""

    def __init__(self, client: redis.Redis, effects: Counter[str], *, ttl_ms: int, key_on: str = "msg_id"):
        self.client = client
        self.effects = effects
        self.ttl_ms = ttl_ms
        self.key_on = key_on

    def key(self, stream: str, msg_id: str, fields: dict[str, str]) -> str:
        """``processed:<stream>:<message id>`` as in the course, or ``...:<event_id>`` (the fix)."""
        return f"{stream}:processed:{fields['event_id'] if self.key_on == 'event_id' else msg_id}"

    def handle(self, stream: str, msg_id: str, fields: dict[str, str], *, crash_before_work: bool = False) -> str:
        """``SET key 1 NX PX ttl`` (redis-py's ``setnx`` takes no TTL), the work; "done", "duplicate" or "crashed"."""
        key = self.key(stream, msg_id, fields)
        if not self.client.set(key, "1", nx=True, px=self.ttl_ms):
            return "duplicate"
        if crash_before_work:
            return "crashed"  # the process dies here: no work, no DEL, no XACK
        try:
            self.effects[fields["event_id"]] += 1  # the work: one charge
        except Exception:
            self.client.delete(key)  # the work failed: drop the marker so that a retry tries again
            raise
        return "done"


def read_one(client: redis.Redis, stream: str, consumer: str, start: str = ">") -> tuple[str, dict[str, str]]:
    """``XREADGROUP`` one entry (``>``: new; an id: this consumer's PEL from there)."""
    msg_id, fields = replies.read(client.xreadgroup(GROUP, consumer, {stream: start}, count=1))[0][1][0]
    return str(msg_id), dict(fields)


def redeliver(client: redis.Redis, stream: str, msg_id: str, to: str) -> tuple[str, dict[str, str]]:
    """A redelivery as the rescuer makes it (``XCLAIM`` with min idle 0 here)."""
    claimed = replies.claimed(client.xclaim(stream, GROUP, to, 0, [msg_id]))
    return str(claimed[0][0]), dict(claimed[0][1])


def add_event(client: redis.Redis, stream: str, event_id: str) -> str:
    return str(client.xadd(stream, {"type": "order.paid", "order_id": "o-1", "amount": "10.00", "event_id": event_id}))


def late_replay(client: redis.Redis, stream: str, *, ttl_ms: int, replay_after_ms: int) -> int:
    """Handle, crash before ``XACK``, replay ``replay_after_ms`` later (within retention): the effects."""
    effects: Counter[str] = Counter()
    handler = CourseMarker(client, effects, ttl_ms=ttl_ms)
    fresh_group(client, stream)
    add_event(client, stream, "evt-1")
    msg_id, fields = read_one(client, stream, "host-1")
    handler.handle(stream, msg_id, fields)  # ... and the process dies before XACK
    time.sleep(replay_after_ms / 1000)
    msg_id, fields = redeliver(client, stream, msg_id, "host-2")
    handler.handle(stream, msg_id, fields)
    client.xack(stream, GROUP, msg_id)
    return effects["evt-1"]


def producer_resend(client: redis.Redis, stream: str, *, key_on: str) -> int:
    """The producer sends the same event twice (new message id, same ``event_id``): the effects."""
    effects: Counter[str] = Counter()
    handler = CourseMarker(client, effects, ttl_ms=60_000, key_on=key_on)
    fresh_group(client, stream)
    add_event(client, stream, "evt-1")
    add_event(client, stream, "evt-1")  # the re-send after a lost reply to XADD
    for _ in range(2):
        msg_id, fields = read_one(client, stream, "host-1")
        handler.handle(stream, msg_id, fields)
        client.xack(stream, GROUP, msg_id)
    return effects["evt-1"]


def crash_between_marker_and_work(client: redis.Redis, stream: str) -> int:
    """The process dies after ``SET NX`` and before the work; the redelivery finds the marker: the effects."""
    effects: Counter[str] = Counter()
    handler = CourseMarker(client, effects, ttl_ms=60_000)
    fresh_group(client, stream)
    add_event(client, stream, "evt-1")
    msg_id, fields = read_one(client, stream, "host-1")
    handler.handle(stream, msg_id, fields, crash_before_work=True)
    msg_id, fields = redeliver(client, stream, msg_id, "host-2")
    if handler.handle(stream, msg_id, fields) == "duplicate":
        client.xack(stream, GROUP, msg_id)  # "already done": acked, and the work is gone for good
    return effects["evt-1"]


def natural_idempotency(client: redis.Redis, stream: str) -> int:
    """``HSET order status paid`` on every delivery (original, redelivery, re-send): the state changes."""
    fresh_group(client, stream)
    order = f"{stream}:order:o-1"
    client.hset(order, mapping={"status": "new"})
    first = add_event(client, stream, "evt-1")
    add_event(client, stream, "evt-1")
    deliveries = [read_one(client, stream, "host-1"), redeliver(client, stream, first, "host-2")]
    deliveries.append(read_one(client, stream, "host-2"))
    changes = 0
    for msg_id, _fields in deliveries:
        before = client.hget(order, "status")
        client.hset(order, "status", "paid")  # UPDATE orders SET status = 'paid': no marker needed
        changes += before != client.hget(order, "status")
        client.xack(stream, GROUP, msg_id)
    return changes


@dataclass(frozen=True)
class Pair:
    """A master and its replica (plain ``redis-server`` processes on free ports)."""

    master: RedisProcess
    replica: RedisProcess


@contextlib.contextmanager
def master_and_replica(run_dir: Path) -> Iterator[Pair]:
    """Start a master and a replica without persistence under ``run_dir``; stop both afterwards."""
    binary = binaries.require("redis-server")
    made: list[RedisProcess] = []
    try:
        for role in ("master", "replica"):
            port = ports.free_port()
            proc = RedisProcess(f"idem-{role}-{port}", port, run_dir, binary)
            extra = f"replicaof 127.0.0.1 {made[0].port}\n" if made else ""
            conf = f'port {port}\nbind 127.0.0.1\ndir "{proc.data_dir}"\nsave ""\nappendonly no\n'
            proc.conf.write_text(conf + "repl-diskless-sync-delay 0\n" + extra)  # sync at once
            proc.start("a free port")
            made.append(proc)
        yield Pair(made[0], made[1])
    finally:
        for proc in made:
            proc.kill()


def marker_lost_in_failover(pair: Pair, stream: str, timeout_s: float = 10.0) -> int:
    """The replica is promoted while the worker still talks to the old master: the effects.

    The message is delivered and replicated; then the replica is promoted (``REPLICAOF NO
    ONE``, what Sentinel sends) while the worker, cut off with the old master, sets its
    marker, does the work and acks there. On the new master the entry is still pending and
    no marker exists, so the rescuer's redelivery does the work again.
    """
    effects: Counter[str] = Counter()
    with contextlib.closing(pair.master.client(2.0)) as old, contextlib.closing(pair.replica.client(2.0)) as new:
        _wait_linked(new, timeout_s)
        fresh_group(old, stream)
        add_event(old, stream, "evt-1")
        msg_id, fields = read_one(old, stream, "host-1")
        if int(command(old, "WAIT", 1, int(timeout_s * 1000))) != 1:
            raise RuntimeError("the replica did not confirm the delivery")
        command(new, "REPLICAOF", "NO", "ONE")
        CourseMarker(old, effects, ttl_ms=60_000).handle(stream, msg_id, fields)
        old.xack(stream, GROUP, msg_id)  # on the old master, which the failover leaves behind
        msg_id, fields = redeliver(new, stream, msg_id, "host-2")
        if CourseMarker(new, effects, ttl_ms=60_000).handle(stream, msg_id, fields) == "done":
            new.xack(stream, GROUP, msg_id)
    return effects["evt-1"]


def _wait_linked(replica: redis.Redis, timeout_s: float) -> None:
    wait_until(lambda: replica.info("replication").get("master_link_status") == "up", timeout_s,
               "the replica to link to its master", 0.02, error=RuntimeError)


def marker_cases(client: redis.Redis, prefix: str, pair: Pair) -> list[Case]:
    """Cases 1-5 and 8 (the worker's cases 6-7 are in :mod:`labs.experiments.worker_crash`)."""
    return [
        Case(1, "SET NX, TTL ≥ retention", "метка курса", "повтор через 300 мс, TTL 2 с",
             late_replay(client, f"{prefix}c1", ttl_ms=2_000, replay_after_ms=300)),
        Case(2, "SET NX, TTL < retention", "метка курса", "повтор через 300 мс, TTL 100 мс",
             late_replay(client, f"{prefix}c2", ttl_ms=100, replay_after_ms=300)),
        Case(3, "метка по ID сообщения", "метка курса", "продюсер отправил событие повторно",
             producer_resend(client, f"{prefix}c3", key_on="msg_id")),
        Case(4, "метка потеряна при failover", "метка курса", "реплику продвинули раньше, чем дошла метка",
             marker_lost_in_failover(pair, f"{prefix}c4")),
        Case(5, "метка осталась после падения", "метка курса", "смерть между SET NX и работой",
             crash_between_marker_and_work(client, f"{prefix}c5")),
        Case(8, "идемпотентно по природе", "без метки", "повтор и повторная отправка SET status",
             natural_idempotency(client, f"{prefix}c8")),
    ]  # fmt: skip


def as_markdown(cases: list[Case]) -> str:
    """The table as Markdown, ordered by case number."""
    rows = ["| № | случай | стратегия | что произошло | эффектов | дублей | потеряно |", "|" + "---|" * 7]
    for c in sorted(cases, key=lambda c: c.number):
        cells = [c.number, c.name, c.strategy, c.scenario, c.effects, c.duplicates, c.lost]
        rows.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(rows)
