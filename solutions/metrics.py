"""The worker's numbers: counters, gauges and a lag histogram, logged every N seconds and served to Prometheus.

Each :class:`Metrics` has a registry of its own, so several workers can live in one process
(a notebook) without clashing. The endpoint (``--metrics-port``) binds to 127.0.0.1 unless
``--metrics-host`` says otherwise. Every series carries the labels ``stream``, ``group`` and
``consumer``; a sharded worker's (on Redis Cluster) carry ``shard`` too, see
:mod:`solutions.shard_metrics`. The names, as Prometheus shows them:

=========================================  =========  ==================================================================
name                                       type       what
=========================================  =========  ==================================================================
``billing_processed_total``                counter    messages handled to the end (charged, or skipped as duplicates)
``billing_acked_total``                    counter    messages acknowledged with XACK after their work
``billing_errors_total``                   counter    processing attempts that failed (left pending for a retry)
``billing_reclaimed_total``                counter    pending messages taken over from other consumers (XAUTOCLAIM)
``billing_dead_lettered_total``            counter    messages moved to ``<stream>:dlq``
``billing_dedupe_skipped_total``           counter    deliveries recognised as already done and not charged again
``billing_deleted_total``                  counter    pending entries found deleted from the stream and acked
``billing_pending``                        gauge      entries delivered to the group and not yet acked (XINFO GROUPS)
``billing_group_lag``                      gauge      not yet delivered to the group (XINFO GROUPS; NaN: unknown)
``billing_stream_length``                  gauge      entries in the stream (XLEN)
``billing_stream_age_seconds``             gauge      age of the oldest entry in the stream
``billing_processing_lag_seconds``         histogram  XADD (the id's timestamp) to processed; buckets 1 ms ... 60 s
``billing_last_processing_lag_seconds``    gauge      the same lag, for the last processed message
=========================================  =========  ==================================================================

The histogram comes as ``_bucket{le=...}``, ``_sum`` and ``_count`` series (p99 with
``histogram_quantile(0.99, rate(billing_processing_lag_seconds_bucket[1m]))``).
``billing_store_up`` is exported once a worker runs (its breaker sets it). The four sampled
gauges (pending, group lag, stream length and age) come from a Redis query
every ``--metrics-interval-s``; they are not exported before the first sample, so a scrape
never shows a stream of 200 entries as ``0``. The log line (:meth:`Snapshot.line`) keeps the
short field names (``stream_age_s``, ``processing_lag_s``).

The group lag is not always known: ``XINFO GROUPS`` answers nil when Redis cannot count the
entries the group has still to read (an entry deleted after the group's position, an
``XGROUP SETID`` without ``ENTRIESREAD``). An unknown lag is not 0: the gauge is then NaN
(``billing_group_lag ... NaN`` in a scrape, a gap in a graph, never below an alert's
threshold by accident) and the log line says ``group_lag=?``.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

COUNTERS = ("processed", "errors", "reclaimed", "dead_lettered", "dedupe_skipped", "acked", "deleted", "store_outages")
GAUGES = ("pending", "group_lag", "stream_length", "stream_age_s", "store_up", "processing_lag_s")
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DEFAULT_HOST = "127.0.0.1"

HELP = {
    "processed": "Messages handled to the end (charged, or skipped as duplicates).",
    "acked": "Messages acknowledged with XACK after their work was done.",
    "errors": "Processing attempts that failed; the message stays pending for a retry.",
    "reclaimed": "Pending messages taken over from other consumers with XAUTOCLAIM.",
    "dead_lettered": "Messages moved to the dead-letter stream <stream>:dlq.",
    "dedupe_skipped": "Deliveries recognised as already done and not charged again.",
    "deleted": "Pending entries found deleted from the stream and acknowledged.",
    "store_outages": "Times the business store (the SQLite ledger) went down; reading pauses until it is back.",
    "store_up": "1 while the business store (the SQLite ledger) takes charges, 0 while it is down.",
    "pending": "Entries delivered to the consumer group and not yet acknowledged (XINFO GROUPS).",
    "group_lag": "Entries in the stream not yet delivered to the consumer group (XINFO GROUPS); NaN: unknown.",
    "stream_length": "Entries in the stream (XLEN).",
    "stream_age_s": "Age in seconds of the oldest entry in the stream.",
    "processing_lag_s": "Seconds from XADD (the message id's timestamp) to the end of processing.",
    "last_processing_lag_s": "Seconds from XADD to the end of processing, for the last processed message.",
}
EXPORTED = {"stream_age_s": "stream_age_seconds"}  # Prometheus spells units out


@dataclass
class Snapshot:
    """Plain numbers for logs, tests and notebooks."""

    processed: int = 0
    errors: int = 0
    reclaimed: int = 0
    dead_lettered: int = 0
    dedupe_skipped: int = 0
    acked: int = 0
    deleted: int = 0
    store_outages: int = 0
    pending: float = 0.0
    group_lag: float = 0.0
    stream_length: float = 0.0
    stream_age_s: float = 0.0
    store_up: float = 1.0
    processing_lag_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def line(self) -> str:
        """``name=value`` pairs for the log (gauges with up to 3 decimals)."""
        return " ".join(f"{k}={format_gauge(v)}" for k, v in self.as_dict().items())


def format_gauge(value: float) -> str:
    """A value for the log line: "?" when unknown (NaN), an integer when whole, else 3 decimals."""
    if math.isnan(value):
        return "?"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}"


class LagHistogram:
    """Cumulative-bucket histogram of the processing lag; one ``bisect`` and two additions per observation."""

    def __init__(self, bounds_s: tuple[float, ...] = LAG_BUCKETS_S) -> None:
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)  # the last one is +Inf
        self.sum_s = 0.0
        self.count = 0

    def observe(self, lag_s: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds_s, lag_s)] += n
        self.sum_s += lag_s * n
        self.count += n

    def buckets(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` pairs, ``+Inf`` last, as Prometheus wants them."""
        out, total = [], 0
        for bound, count in zip([*map(str, self.bounds_s), "+Inf"], self.counts, strict=True):
            total += count
            out.append((bound, float(total)))
        return out


def _lag_s(msg_id: str) -> float:
    return max(0.0, time.time() - int(msg_id.split("-", 1)[0]) / 1000)


class Metrics:
    """Counters, gauges and the lag histogram of one worker (labels: stream, group, consumer).

    The hot path only adds to plain numbers; Prometheus reads them when it scrapes, through
    a collector, so counting costs nothing per message beyond a few additions.
    """

    def __init__(self, *, stream: str, group: str, consumer: str) -> None:
        self.values = Snapshot()
        self.lag = LagHistogram()
        self.sampled: set[str] = set()
        self.labels = {"stream": stream, "group": group, "consumer": consumer}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Collector(self))

    def inc(self, name: str, amount: int = 1) -> None:
        """Add to one of :data:`COUNTERS`."""
        setattr(self.values, name, getattr(self.values, name) + amount)

    def set(self, name: str, value: float) -> None:
        """Set one of :data:`GAUGES` (from then on it is exported)."""
        setattr(self.values, name, float(value))
        self.sampled.add(name)

    def observe_processed(self, msg_id: str) -> None:
        """Count a processed message and its processing lag (now minus the id's timestamp)."""
        self.observe_batch(1, msg_id)

    def observe_batch(self, n: int, last_msg_id: str) -> None:
        """:meth:`observe_processed` for ``n`` messages at once, each at the last one's lag."""
        lag_s = _lag_s(last_msg_id)
        self.values.processed += n
        self.values.processing_lag_s = lag_s
        self.lag.observe(lag_s, n)

    def snapshot(self) -> Snapshot:
        return Snapshot(**self.values.as_dict())

    def serve(self, port: int, host: str = DEFAULT_HOST) -> None:
        """Serve ``/metrics`` for Prometheus on ``host:port`` (loopback unless told otherwise)."""
        start_http_server(port, addr=host, registry=self.registry)
        log.info("prometheus metrics on http://%s:%s/metrics", host, port)


class _Collector(Collector):
    """Exposes a :class:`Metrics` under the names of the module's table."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        names, values = list(m.labels), list(m.labels.values())
        for name in COUNTERS:
            counter = CounterMetricFamily(f"billing_{name}", HELP[name], labels=names)
            counter.add_metric(values, getattr(m.values, name))
            yield counter
        for name in GAUGES[:-1]:
            if name in m.sampled:
                gauge = GaugeMetricFamily(f"billing_{EXPORTED.get(name, name)}", HELP[name], labels=names)
                gauge.add_metric(values, getattr(m.values, name))
                yield gauge
        histogram = HistogramMetricFamily("billing_processing_lag_seconds", HELP["processing_lag_s"], labels=names)
        histogram.add_metric(values, buckets=m.lag.buckets(), sum_value=m.lag.sum_s)
        yield histogram
        if m.lag.count:
            last = GaugeMetricFamily("billing_last_processing_lag_seconds", HELP["last_processing_lag_s"], labels=names)
            last.add_metric(values, m.values.processing_lag_s)
            yield last


def group_numbers(groups: list[dict[Any, Any]], group: str) -> tuple[int, int | None]:
    """``(pending, lag)`` of ``group`` from an ``XINFO GROUPS`` reply; the lag is None when Redis
    does not know it (nil in the reply) or there is no such group."""
    for info in groups:
        name = info.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == group:
            lag = info.get("lag")
            return int(info.get("pending") or 0), None if lag is None else int(lag)
    return 0, None


def stream_age_s(first_id: bytes | str | None, now_s: float) -> float:
    """How old the oldest entry is: now minus the timestamp in its id (0 for an empty stream)."""
    if first_id is None:
        return 0.0
    text = first_id.decode() if isinstance(first_id, bytes) else first_id
    return max(0.0, now_s - int(text.split("-", 1)[0]) / 1000)
