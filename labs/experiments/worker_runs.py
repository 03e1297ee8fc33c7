"""The reference worker over pre-produced events, in this process, timed until all are done."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from pathlib import Path

from labs.experiments import scenario_settings
from labs.polling import wait_until_async
from solutions.settings import Settings
from solutions.worker import Worker

POLL_S = 0.005


def bench_settings(
    url: str,
    stream: str = "bench:placeholder",
    *,
    dedupe: str,
    ledger: Path,
    parallelism: int,
    count: int,
    delay_ms: int = 0,
) -> Settings:
    """Settings for a throughput run: the experiments' base with no rescuer, no metrics chatter, a 500 ms BLOCK."""
    return replace(scenario_settings.base(stream, ledger, redis_url=url), consumer="bench-worker", dedupe=dedupe,
                   parallelism=parallelism, count=count, block_ms=500, handler_delay_ms=delay_ms,
                   handler_jitter_ms=0, fail_every=0, rescuer=False, metrics_interval_s=3600.0,
                   drain_timeout_s=10.0)


async def run_worker(settings: Settings, n: int, *, timeout_s: float = 300.0) -> float:
    """Run a worker until it has processed ``n`` messages; returns messages per second.

    It polls the counter itself (``metrics.values``), not :attr:`Worker.counts`, which copies
    every figure: the poll runs in the worker's process and must not add to its cost.
    """
    worker = Worker(settings)
    values = worker.metrics.values
    task = asyncio.create_task(worker.run())
    started = time.perf_counter()

    def all_processed() -> bool:
        if values.processed < n and task.done():
            raise RuntimeError(f"the worker stopped after {values.processed} of {n} messages")
        return values.processed >= n

    try:
        await wait_until_async(all_processed, timeout_s, lambda: f"{n} messages (the worker did {values.processed})",
                               POLL_S, error=RuntimeError)
        elapsed_s = time.perf_counter() - started
    finally:
        worker.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
    return n / elapsed_s
