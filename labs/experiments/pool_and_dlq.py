"""The reference worker's pool and dead letters, measured (course module 3, section 3.4).

- :func:`pool_run`: a backlog of ``entries`` messages and one ``solutions`` worker with a
  given ``count`` and ``parallelism``. The PEL is sampled while it works: it stays bounded
  by ``COUNT`` and the pool together (backpressure: the rest waits in the stream, not in the
  worker's memory), and the time to drain the backlog falls as parallelism grows.
- :func:`dlq_run`: good messages whose handling fails (``fail_every``) and poison messages
  (bad amount, missing field, undecodable bytes). Transient failures are retried through
  the rescuer until ``max_attempts`` deliveries, then dead-lettered with the reason and the
  attempts; poison goes to ``<stream>:dlq`` at once.

Only the contract-stable surface of ``solutions`` is used (``Settings``, ``Worker.run`` /
``request_stop`` / ``counts``, the ledger schema, the DLQ stream). Tests in
``tests/test_pool_and_dlq.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from labs.experiments import scenario_settings
from labs.polling import poll_async
from solutions.metrics import Snapshot
from solutions.settings import Settings
from solutions.worker import Worker

GROUP = "billing"
POISON: dict[str, dict[FieldT, EncodableT]] = {
    "bad amount": {"type": "order.paid", "order_id": "o-bad", "amount": "ten", "event_id": "poison-1"},
    "missing order_id": {"type": "order.paid", "amount": "5.00", "event_id": "poison-2"},
    "undecodable bytes": {"type": "order.paid", "order_id": "o-bytes", "amount": b"\xff\xfe", "event_id": "poison-3"},
}


def add_orders(client: redis.Redis, stream: str, n: int) -> list[str]:
    """``n`` well-formed ``order.paid`` events, each with its own order and event id."""
    run = uuid.uuid4().hex[:6]
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"type": "order.paid", "order_id": f"o-{i}", "amount": "10.00", "event_id": f"{run}-{i}"})
    return [str(x) for x in pipe.execute()]


def base_settings(redis_url: str, stream: str, ledger: Path) -> Settings:
    """Settings for a short notebook run: the experiments' base, no per-key lanes (a scenario
    changes what it needs with ``dataclasses.replace``)."""
    return replace(scenario_settings.base(stream, ledger, redis_url=redis_url), order_key="")


async def run_until(worker: Worker, done: Callable[[], bool], timeout_s: float, on_tick: Callable[[], None]) -> bool:
    """Run ``worker`` as a task until ``done()`` (polled every 10 ms, ``on_tick`` each time) or the deadline."""
    task = asyncio.create_task(worker.run())
    finished = False

    def ticked() -> bool:
        nonlocal finished
        if task.done():
            return True
        on_tick()
        finished = done()
        return finished

    try:
        await poll_async(ticked, timeout_s, 0.01, in_thread=False)
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, timeout=30)
    return finished


@dataclass(frozen=True)
class PoolRun:
    count: int
    parallelism: int
    entries: int
    max_pending: int
    drain_s: float
    finished: bool


async def pool_run(
    redis_url: str, stream: str, ledger: Path, *, count: int, parallelism: int, entries: int = 120, delay_ms: int = 40
) -> PoolRun:
    """Drain a backlog of ``entries`` with one worker; the largest PEL seen and the time it took."""
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        client.delete(stream)
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        add_orders(client, stream, entries)
        settings = replace(
            base_settings(redis_url, stream, ledger), consumer=f"pool-{parallelism}", count=count,
            parallelism=parallelism, handler_delay_ms=delay_ms, dedupe="none", rescuer=False,
        )  # fmt: skip
        seen: list[int] = [0]
        started = time.monotonic()

        def sample() -> None:
            seen.append(int(client.xpending(stream, GROUP)["pending"]))

        def drained() -> bool:
            return seen[-1] == 0 and int(client.xinfo_groups(stream)[0]["lag"] or 0) == 0

        finished = await run_until(Worker(settings), drained, 60, sample)
        return PoolRun(count, parallelism, entries, max(seen), time.monotonic() - started, finished)


@dataclass(frozen=True)
class DeadLetter:
    original_id: str
    order_id: str
    error: str
    attempts: int


@dataclass(frozen=True)
class DlqRun:
    sent: int
    charged: int
    dead: list[DeadLetter]
    counts: Snapshot
    pending_left: int
    finished: bool
    poison_ids: dict[str, str] = field(default_factory=dict)  # reason label -> message id


def dead_letters(client: redis.Redis, stream: str) -> list[DeadLetter]:
    """``XRANGE <stream>:dlq``: the dead letters (bytes decoded with replacement)."""
    out = []
    entries: Any = client.xrange(f"{stream}:dlq")
    for _id, raw in entries:
        fields = {bytes(k).decode(): bytes(v).decode(errors="replace") for k, v in raw.items()}
        out.append(DeadLetter(fields["id"], fields.get("order_id", ""), fields["error"], int(fields["attempts"])))
    return out


def _xadd(client: redis.Redis, stream: str, fields: dict[FieldT, EncodableT]) -> str:
    msg_id: Any = client.xadd(stream, fields)
    return bytes(msg_id).decode()


def charges(ledger: Path) -> int:
    """All rows of the ledger's ``charges`` table (0 when it does not exist yet)."""
    with contextlib.closing(sqlite3.connect(ledger, timeout=5)) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM charges").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


async def dlq_run(
    redis_url: str, stream: str, ledger: Path, *, good: int, fail_every: int, max_attempts: int, timeout_s: float = 30
) -> DlqRun:
    """``good`` orders plus the three :data:`POISON` messages through one worker with retries and a DLQ."""
    with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
        client.delete(stream, f"{stream}:dlq")
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        add_orders(client, stream, good)
        poison_ids = {label: _xadd(client, stream, fields) for label, fields in POISON.items()}
        worker = Worker(
            replace(
                base_settings(redis_url, stream, ledger), consumer="dlq-worker", dedupe="sqlite", handler_delay_ms=5,
                fail_every=fail_every, max_attempts=max_attempts, min_idle_ms=100, claim_interval_ms=100,
            )
        )  # fmt: skip
        total = good + len(POISON)

        def settled() -> bool:
            pending = int(client.xpending(stream, GROUP)["pending"])
            lag = int(client.xinfo_groups(stream)[0]["lag"] or 0)
            return pending == 0 and lag == 0 and charges(ledger) + client.xlen(f"{stream}:dlq") >= total

        finished = await run_until(worker, settled, timeout_s, lambda: None)
        return DlqRun(
            sent=total,
            charged=charges(ledger),
            dead=dead_letters(client, stream),
            counts=worker.counts,
            pending_left=int(client.xpending(stream, GROUP)["pending"]),
            finished=finished,
            poison_ids=poison_ids,
        )
