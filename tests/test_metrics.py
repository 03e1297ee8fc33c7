"""Metrics: counters and gauges, the periodic log line, and the Prometheus endpoint."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from pathlib import Path

import pytest
import redis
from billing_support import produce, running, settings, until

from labs.launcher.ports import free_port
from solutions.metrics import Metrics, group_numbers, stream_age_s


def test_prometheus_endpoint_and_log_line(
    redis_url: str, key_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    port = free_port()
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", metrics_port=port, metrics_interval_s=0.2)
    produce(client, s.stream, 5)
    caplog.set_level(logging.INFO, logger="solutions.worker")

    async def scenario() -> str:
        async with running(s) as worker:
            await until(lambda: worker.counts.processed == 5, 10, "five charges")
            await until(lambda: worker.counts.stream_length == 5, 5, "the gauges refreshed")
            url = f"http://127.0.0.1:{port}/metrics"
            return await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())

    body = asyncio.run(scenario())
    assert "billing_processed_total{" in body
    line = next(ln for ln in body.splitlines() if ln.startswith("billing_processed_total{"))
    assert line.endswith(" 5.0")
    for name in ("billing_errors_total", "billing_reclaimed_total", "billing_dead_lettered_total",
                 "billing_dedupe_skipped_total", "billing_pending{", "billing_group_lag{",
                 "billing_stream_length{", "billing_stream_age_s{", "billing_processing_lag_s{"):
        assert name in body, name
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics ")]
    assert logged and "processed=5" in logged[-1] and "stream_length=5" in logged[-1]


def test_helpers() -> None:
    groups = [{"name": b"other", "pending": 3, "lag": 1}, {"name": b"billing", "pending": 7, "lag": None}]
    assert group_numbers(groups, "billing") == (7, 0)
    assert group_numbers([], "billing") == (0, 0)
    assert stream_age_s(b"1000-0", 11.0) == 10.0
    assert stream_age_s(None, 11.0) == 0.0
    m1 = Metrics(stream="s", group="g", consumer="a")
    m2 = Metrics(stream="s", group="g", consumer="b")  # two workers in one process do not clash
    m1.inc("processed", 2)
    assert (m1.snapshot().processed, m2.snapshot().processed) == (2, 0)
