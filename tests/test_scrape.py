"""Scraping a worker's /metrics: a real prometheus_client registry served on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from labs.launcher.ports import free_port
from labs.panels.scrape import (
    Quantile,
    ScrapeError,
    WorkerNumbers,
    fetch_metrics,
    histogram_quantile,
    parse_metrics,
    scrape,
    worker_numbers,
)

pytestmark = pytest.mark.timeout(30)
LABELS = ("stream", "group", "consumer")


def new_style_registry() -> tuple[CollectorRegistry, Counter, Histogram]:
    """Counters, gauges in ``_seconds`` and the processing lag as a histogram."""
    registry = CollectorRegistry()
    processed = Counter("billing_processed", "processed", LABELS, registry=registry)
    Counter("billing_errors", "errors", LABELS, registry=registry).labels("o", "b", "w1").inc(2)
    Counter("billing_reclaimed", "reclaimed", LABELS, registry=registry).labels("o", "b", "w1").inc(1)
    Gauge("billing_pending", "pending", LABELS, registry=registry).labels("o", "b", "w1").set(5)
    Gauge("billing_stream_age_seconds", "age", LABELS, registry=registry).labels("o", "b", "w1").set(12.5)
    lag = Histogram("billing_processing_lag_seconds", "lag", LABELS, registry=registry)
    Gauge("billing_last_processing_lag_seconds", "last", LABELS, registry=registry).labels("o", "b", "w1").set(0.3)
    processed.labels("o", "b", "w1").inc(10)
    return registry, processed, lag


@pytest.fixture
def served() -> Iterator[tuple[str, CollectorRegistry, Counter, Histogram]]:
    registry, processed, lag = new_style_registry()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{port}/metrics", registry, processed, lag
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


Served = tuple[str, CollectorRegistry, Counter, Histogram]


def test_scrape_reads_counters_gauges_and_a_histogram(served: Served) -> None:
    url, _, processed, lag = served
    for seconds in (0.1, 0.3):
        lag.labels("o", "b", "w1").observe(seconds)
    first = scrape(url)
    assert (first.processed, first.errors, first.reclaimed, first.pending) == (10, 2, 1, 5)
    assert first.stream_age_s == 12.5
    assert first.group_lag is None  # not exported here: None, not 0
    assert first.lag_count == 2 and first.lag_mean_s == pytest.approx(0.2)
    assert first.lag_last_s == 0.3  # the gauge beside the histogram
    assert dict(first.lag_buckets)[0.25] == 1 and dict(first.lag_buckets)[float("inf")] == 2  # cumulative
    processed.labels("o", "b", "w2").inc(5)  # a second worker behind the same endpoint: summed
    lag.labels("o", "b", "w1").observe(1.0)
    second = scrape(url)
    assert second.processed == 15
    assert second.lag_since(first) == pytest.approx(1.0)  # the mean of what happened in between
    assert second.lag_since(second) is None


def test_older_names_and_a_lag_gauge() -> None:
    registry = CollectorRegistry()
    Gauge("billing_stream_age_s", "age", registry=registry).set(3)
    Gauge("billing_processing_lag_s", "lag", registry=registry).set(0.25)
    Gauge("billing_group_lag", "lag", registry=registry).set(4)
    numbers = worker_numbers(parse_metrics(generate_latest(registry).decode()))
    assert numbers == WorkerNumbers(stream_age_s=3, group_lag=4, lag_last_s=0.25)
    assert numbers.lag_mean_s == 0.25 and numbers.lag_since(None) == 0.25


def test_unreachable_endpoint_and_garbage_are_scrape_errors() -> None:
    with pytest.raises(ScrapeError):
        fetch_metrics(f"http://127.0.0.1:{free_port()}/metrics", timeout_s=0.5)
    with pytest.raises(ScrapeError):
        parse_metrics("this is { not prometheus\n")


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    registry = CollectorRegistry()
    lag = Histogram("billing_processing_lag_seconds", "lag", buckets=(0.1, 0.5, 1.0), registry=registry)
    for seconds in [0.05] * 50 + [0.3] * 40 + [0.8] * 10:
        lag.observe(seconds)
    buckets = worker_numbers(parse_metrics(generate_latest(registry).decode())).lag_buckets
    assert buckets == ((0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (float("inf"), 100.0))
    assert histogram_quantile(0.5, buckets) == Quantile(0.1, 0.0, 0.1)  # rank 50 ends the first bucket
    middle, high = histogram_quantile(0.7, buckets), histogram_quantile(0.99, buckets)
    assert middle and (middle.lower, middle.upper) == (0.1, 0.5) and middle.value == pytest.approx(0.3)  # 20 of 40
    assert high and (high.lower, high.upper) == (0.5, 1.0) and high.value == pytest.approx(0.95)
    assert histogram_quantile(0.99, ((0.1, 0.0), (float("inf"), 0.0))) is None
    assert histogram_quantile(0.99, ((0.1, 1.0), (float("inf"), 5.0))) == Quantile(0.1, 0.1, float("inf"))
