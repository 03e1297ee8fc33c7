"""Metrics: counters and gauges, the periodic log line, and the Prometheus endpoint."""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
import urllib.request
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from billing_support import produce, running, settings, until

from labs.launcher.ports import free_port
from solutions.metrics import Metrics, group_numbers, stream_age_s
from solutions.worker import Worker, backlog


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
            # The log line comes every 0.2 s: wait for one written after the charges, not the one before them.
            await until(lambda: any("processed=5" in m for m in logged()), 5, "a metrics line after the charges")
            url = f"http://127.0.0.1:{port}/metrics"
            return await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics ")]

    body = asyncio.run(scenario())
    assert "billing_processed_total{" in body
    line = next(ln for ln in body.splitlines() if ln.startswith("billing_processed_total{"))
    assert line.endswith(" 5.0")
    for name in ("billing_errors_total", "billing_reclaimed_total", "billing_dead_lettered_total",
                 "billing_dedupe_skipped_total", "billing_pending{", "billing_group_lag{",
                 "billing_stream_length{", "billing_stream_age_seconds{", "billing_last_processing_lag_seconds{",
                 'billing_processing_lag_seconds_bucket{consumer="', "billing_processing_lag_seconds_count{"):
        assert name in body, name
    assert "_s{" not in body  # units spelled out: _seconds
    assert "# HELP billing_errors_total Processing attempts that failed" in body
    count = next(ln for ln in body.splitlines() if ln.startswith("billing_processing_lag_seconds_count{"))
    assert count.endswith(" 5.0")
    last = logged()[-1]
    assert "processed=5" in last and "stream_length=5" in last


def test_an_unknown_group_lag_is_reported_as_unknown(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    """A group created at an id in the middle of a stream: Redis cannot count what it has left to
    read (XINFO GROUPS says nil). The gauge is NaN, the scrape says NaN and the log line ``?``, never 0."""
    client = redis.Redis.from_url(redis_url)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3")
    ids = produce(client, s.stream, 5)
    client.xgroup_create(s.stream, s.group, id=ids[1])
    assert client.xinfo_groups(s.stream)[0]["lag"] is None

    async def refresh() -> Worker:
        worker = Worker(s)  # not run: only its gauges are read
        async with aioredis.Redis.from_url(redis_url) as aclient:
            await worker.refresh_gauges(aclient)
            assert await backlog(aclient, s) == "the group has 0 pending and ? not yet read"
        return worker

    worker = asyncio.run(refresh())
    assert math.isnan(worker.counts.group_lag) and worker.counts.stream_length == 5
    assert "group_lag=? " in worker.metrics.values.line()
    (line,) = [ln for ln in scrape(worker.metrics).splitlines() if ln.startswith("billing_group_lag{")]
    assert line.endswith(" NaN")


def test_helpers() -> None:
    groups = [{"name": b"other", "pending": 3, "lag": 1}, {"name": b"billing", "pending": 7, "lag": None}]
    assert group_numbers(groups, "billing") == (7, None)  # Redis does not know the lag: unknown, not 0
    assert group_numbers(groups, "other") == (3, 1)
    assert group_numbers([], "billing") == (0, None)
    assert stream_age_s(b"1000-0", 11.0) == 10.0
    assert stream_age_s(None, 11.0) == 0.0
    m1 = Metrics(stream="s", group="g", consumer="a")
    m2 = Metrics(stream="s", group="g", consumer="b")  # two workers in one process do not clash
    m1.inc("processed", 2)
    assert (m1.snapshot().processed, m2.snapshot().processed) == (2, 0)


def scrape(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_sampled_gauges_are_not_exported_before_the_first_sample() -> None:
    m = Metrics(stream="s", group="g", consumer="c")
    body = scrape(m)
    assert "billing_stream_length{" not in body and "billing_pending{" not in body
    assert "billing_last_processing_lag_seconds{" not in body  # nothing processed yet
    assert "billing_processed_total{" in body  # a counter at 0 is true from the start
    m.set("stream_length", 200)
    assert 'billing_stream_length{consumer="c",group="g",stream="s"} 200.0' in scrape(m)


def test_processing_lag_histogram_buckets() -> None:
    m = Metrics(stream="s", group="g", consumer="c")
    now_ms = int(time.time() * 1000)
    m.observe_batch(3, f"{now_ms - 2000}-0")  # about 2 s old: in the 2.5 s bucket, not in the 1 s one
    m.observe_processed(f"{now_ms + 10_000}-0")  # an id from the future (clock skew) counts as 0
    body = scrape(m)
    bucket = {ln.split('le="')[1].split('"')[0]: float(ln.rsplit(" ", 1)[1])
              for ln in body.splitlines() if ln.startswith("billing_processing_lag_seconds_bucket{")}
    assert bucket["0.001"] == 1 and bucket["1.0"] == 1 and bucket["2.5"] == 4 and bucket["+Inf"] == 4
    assert m.snapshot().processed == 4


def test_endpoint_binds_to_loopback_by_default() -> None:
    m = Metrics(stream="s", group="g", consumer="c")
    port = free_port()
    m.serve(port)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    outside = _non_loopback_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    with pytest.raises(OSError):
        socket.create_connection((outside, port), timeout=2).close()


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent for a UDP connect
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address
