"""What a fast consumer does, shown on the reference worker (notebook 07, section 6).

- :func:`raw_and_dict`: one entry as Redis sends it (a flat list of fields, in the producer's
  order, a field given twice kept twice) beside redis-py's dict of it (one dict per entry).
- :func:`batch_run`: the worker over a backlog, with a handler and a client that count what
  the worker asks of them: a call of the handler per run for the work and one for the
  charges (a flat list of rows, no object per message), an XACK per read batch at most.
- :func:`cpu_per_message`: the CPU time per message of the ceiling (a bare ``redis.asyncio``
  loop, as in ``make bench``) and of the worker, in this process. Shown, never asserted: it
  depends on the machine.

Tests: ``tests/test_fast_consumer.py``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from labs.experiments import ceiling, worker_runs
from labs.experiments.worker_procs import produce_backlog
from labs.polling import poll_async
from solutions.connection import PackingConnection, execute
from solutions.handler import BillingHandler, Failures, Slot
from solutions.ledger import Charges
from solutions.messages import OrderEvent
from solutions.reader import NEW, Entry, xreadgroup_entries
from solutions.settings import Settings
from solutions.worker import Worker


async def raw_and_dict(url: str, stream: str) -> tuple[Entry, dict[bytes, bytes]]:
    """XADD one entry with a field given twice; read it raw (as the worker does) and as redis-py's dict."""
    settings = Settings(redis_url=url, stream=stream, group="billing", consumer="raw", count=1)
    async with aioredis.Redis.from_url(url) as client:
        await client.xgroup_create(stream, "billing", id="0", mkstream=True)
        fields = ("order_id", "o-1", "amount", "1.50", "note", "a", "note", "b")  # XADD takes a field twice
        await execute(client, "XADD", stream, "*", *fields)
        (entry,) = await xreadgroup_entries(client, settings, NEW, None)
        rows: Any = await client.xrange(stream)
    return entry, rows[0][1]


class CountingRuns(BillingHandler):
    """The lab's instant handler, counting the calls the pipeline makes of it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream=stream, delay_ms=0)
        self.runs = self.events = self.charge_runs = self.charged = 0

    async def process_run(self, events: Sequence[OrderEvent], slot: Slot | None) -> Failures:
        self.runs += 1
        self.events += len(events)
        return await super().process_run(events, slot)

    def charges(self, events: Sequence[OrderEvent], consumer: str) -> Charges:
        self.charge_runs += 1
        self.charged += len(events)
        return super().charges(events, consumer)


class CountingClient(aioredis.Redis):
    """A real client that counts the commands its connections send, by name (on the connection:
    the worker's hot commands skip ``execute_command``, see :class:`solutions.connection.Direct`)."""

    def __init__(self, url: str) -> None:
        sent: collections.Counter[str] = collections.Counter()

        class CountingConnection(PackingConnection):
            async def send_command(self, *args: Any, **kwargs: Any) -> None:
                name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
                sent[name.upper()] += 1
                await super().send_command(*args, **kwargs)

        super().__init__(connection_pool=aioredis.ConnectionPool.from_url(url, connection_class=CountingConnection))
        self.sent = sent


@dataclass(frozen=True)
class BatchRun:
    events: int
    charged: int
    handler_runs: int
    handled_in_runs: int
    charge_runs: int
    charged_in_runs: int
    reads: int
    xreadgroups: int
    xacks: int


async def batch_run(url: str, stream: str, ledger: Path, n: int = 3000, count: int = 100) -> BatchRun:
    """The worker (``--dedupe sqlite``) over ``n`` pre-produced events; what it asked for."""
    produce_backlog(redis.Redis.from_url(url), stream, n)
    settings = replace(worker_runs.bench_settings(url, stream, dedupe="sqlite", ledger=ledger, parallelism=count,
                                                  count=count), group="billing")
    handler = CountingRuns(stream)
    client = CountingClient(url)
    worker = Worker(settings, handler=handler, client=client)
    task = asyncio.create_task(worker.run())
    try:
        await poll_async(lambda: worker.metrics.values.processed >= n or task.done(), 30, 0.02, in_thread=False)
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 30)
        await client.aclose()
    reads = worker.reader.reads if worker.reader else 0
    charged = worker.ledger.total_charges()
    worker.ledger.close()
    return BatchRun(n, charged, handler.runs, handler.events, handler.charge_runs, handler.charged, reads,
                    client.sent["XREADGROUP"], client.sent["XACK"])


@dataclass(frozen=True)
class CpuPerMessage:
    ceiling_us: float
    worker_us: float


async def cpu_per_message(url: str, stream: str, ledger: Path, n: int = 5000) -> CpuPerMessage:
    """CPU microseconds per message (``time.process_time``) of the ceiling, then of the worker."""
    await asyncio.to_thread(ceiling.produce, url, stream + ":ceiling", n)
    started = time.process_time()
    await ceiling.ceiling(url, stream + ":ceiling", n)
    ceiling_us = (time.process_time() - started) / n * 1e6
    await asyncio.to_thread(ceiling.produce, url, stream + ":worker", n)
    settings = worker_runs.bench_settings(url, dedupe="sqlite", ledger=ledger, parallelism=100, count=100)
    started = time.process_time()
    await worker_runs.run_worker(replace(settings, stream=stream + ":worker"), n)
    return CpuPerMessage(ceiling_us, (time.process_time() - started) / n * 1e6)
