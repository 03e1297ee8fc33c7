"""The business store goes down under a running worker: a pause, not the DLQ (notebook 06, section 7).

:func:`locked_ledger_run` runs the reference worker (``--dedupe sqlite``) in this process,
lets it charge a few events, then holds its ledger's write lock from another SQLite
connection, as a migration or a backup would, for ``hold_s`` while more events arrive, and
lets go. ``max_attempts x min_idle`` is much shorter than the hold: a worker that spent a
delivery attempt on every failed charge would dead-letter every event that arrived.

What the run records is what an operator would look at, none of it from the worker's own
counts: the ledger (charges, their times), the DLQ, the PEL and the group's lag sampled at
the end of the hold (the messages in hand and their delivery counters), and the store
breaker's log lines. Tests: ``tests/test_locked_ledger.py``; every kind of store fault
for every strategy: ``tests/test_store_outage.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from labs.experiments.pool_and_dlq import GROUP, add_orders, base_settings, charges
from labs.polling import poll_async
from solutions.ledger import read_rows
from solutions.metrics import Snapshot
from solutions.worker import Worker

BREAKER_LOGGER = "solutions.store_breaker"
CHARGED = "SELECT event_id, charged_at FROM charges"


@dataclass(frozen=True)
class OutageRun:
    sent: int
    charged: int  # distinct events in the ledger
    charged_twice: int  # events with more than one charge
    dead_lettered: int
    pending_left: int
    hold_s: float
    max_attempts: int
    min_idle_ms: int
    pending_in_outage: int  # at the end of the hold: messages in the PEL ...
    max_delivered_in_outage: int  # ... the largest delivery counter among them ...
    unread_in_outage: int  # ... and the events not read at all (the group's lag)
    first_charge_after_s: float  # from the lock's release to the first charge after it
    store_log: tuple[str, ...]  # what the store breaker logged, in order
    counts: Snapshot
    finished: bool


class _Lines(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def locked_ledger_run(
    redis_url: str, stream: str, ledger: Path, *, before: int = 5, during: int = 20, hold_s: float = 2.0,
    max_attempts: int = 3, min_idle_ms: int = 100, timeout_s: float = 30.0,
) -> OutageRun:
    """Charge ``before`` events, lock the ledger for ``hold_s`` while ``during`` more arrive, let go."""
    lines: list[str] = []
    handler = _Lines(lines)
    breaker_log = logging.getLogger(BREAKER_LOGGER)
    breaker_log.addHandler(handler)
    try:
        with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
            client.delete(stream, f"{stream}:dlq")
            client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            worker = Worker(replace(
                base_settings(redis_url, stream, ledger), consumer="store-outage", dedupe="sqlite",
                max_attempts=max_attempts, min_idle_ms=min_idle_ms, claim_interval_ms=50, ledger_busy_timeout_ms=100,
            ))  # fmt: skip
            task = asyncio.create_task(worker.run())
            sent = before + during
            try:
                add_orders(client, stream, before)
                await poll_async(lambda: task.done() or charges(ledger) >= before, timeout_s)
                holder = sqlite3.connect(ledger, isolation_level=None, timeout=5)
                holder.execute("BEGIN IMMEDIATE")  # the write lock: every write of the worker now waits, then fails
                locked_at = time.monotonic()
                try:
                    for part in range(4):  # events keep arriving while the store is down
                        add_orders(client, stream, during // 4 + (1 if part < during % 4 else 0))
                        await asyncio.sleep(hold_s / 8)
                    await asyncio.sleep(max(0.0, hold_s - (time.monotonic() - locked_at)))
                    rows = client.xpending_range(stream, GROUP, min="-", max="+", count=1000)
                    lag = int(client.xinfo_groups(stream)[0]["lag"] or 0)
                finally:
                    released_at = time.time()
                    holder.execute("ROLLBACK")
                    holder.close()

                def settled() -> bool:
                    done = len({row[0] for row in read_rows(ledger, CHARGED)}) + client.xlen(f"{stream}:dlq")
                    return int(client.xpending(stream, GROUP)["pending"]) == 0 and done >= sent

                await poll_async(lambda: task.done() or settled(), timeout_s)
                finished = settled()
            finally:
                worker.request_stop()
                await asyncio.wait_for(task, 30)
            charged = read_rows(ledger, CHARGED)
            per_event: dict[str, int] = {}
            for event_id, _ in charged:
                per_event[event_id] = per_event.get(event_id, 0) + 1
            after = [t for _, t in charged if t >= released_at]
            return OutageRun(
                sent=sent,
                charged=len(per_event),
                charged_twice=sum(n > 1 for n in per_event.values()),
                dead_lettered=int(client.xlen(f"{stream}:dlq")),
                pending_left=int(client.xpending(stream, GROUP)["pending"]),
                hold_s=hold_s,
                max_attempts=max_attempts,
                min_idle_ms=min_idle_ms,
                pending_in_outage=len(rows),
                max_delivered_in_outage=max((int(row["times_delivered"]) for row in rows), default=0),
                unread_in_outage=lag,
                first_charge_after_s=min(after) - released_at if after else -1.0,
                store_log=tuple(lines),
                counts=worker.counts,
                finished=finished,
            )
    finally:
        breaker_log.removeHandler(handler)
