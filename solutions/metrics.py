"""The worker's numbers: counters, gauges and a lag histogram, logged every N seconds and served to Prometheus.

Each :class:`Metrics` has a registry of its own, so several workers can live in one process
(a notebook) without clashing. The endpoint (``--metrics-port``) binds to 127.0.0.1 unless
``--metrics-host`` says otherwise. Every series carries the labels ``stream``, ``group`` and
``consumer``; a sharded worker's (on Redis Cluster) carry ``shard`` too, see
:class:`WorkerMetrics`. The names, as Prometheus shows them:

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from solutions.stream_ids import id_ms

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

    def as_dict(self) -> dict[str, float]:
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
    return max(0.0, time.time() - id_ms(msg_id) / 1000)


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
        return replace(self.values)  # a copy

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


# -- a worker's parts: one stream, or the shards of a stream on Redis Cluster -----------------
#
# Each part (a stream, or a shard ``orders:{0}``, ``orders:{1}`` ...) keeps a Metrics of its own, so
# that a dashboard shows which shard stalls. On ``/metrics`` every series of a shard carries the
# usual labels with ``stream`` set to the shard's key (the key Redis and redis_exporter know, so a
# join ``on (stream, group)`` with the exporter's series works per shard) and one more label,
# ``shard``: its index in the stream's shard set. A single stream has no ``shard`` label, so its
# series are those of the table above. The totals over shards are a PromQL ``sum``:
#
#     sum without (stream, shard) (billing_group_lag)       # the group's lag over every shard
#     sum by (shard) (rate(billing_processed_total[1m]))    # throughput per shard
#
# The business store is one for every shard, and an outage pauses them all: ``store_up`` and
# ``store_outages`` are set on every part alike (EveryPart), so read them with ``max``.

SHARD_LABEL = "shard"
# The oldest, the latest; and the store's outages, counted on every part alike (EveryPart).
MAX_FIELDS = frozenset({"stream_age_s", "processing_lag_s", "store_outages"})
MIN_FIELDS = frozenset({"store_up"})  # one store for every part


def part_metrics(*, stream: str, group: str, consumer: str, shard_index: int | None = None) -> Metrics:
    """The metrics of one part: ``stream`` is its key; a shard also has its ``shard`` index label."""
    metrics = Metrics(stream=stream, group=group, consumer=consumer)
    if shard_index is not None:
        metrics.labels[SHARD_LABEL] = str(shard_index)
    return metrics


def total(snapshots: Mapping[str, Snapshot]) -> Snapshot:
    """Counters and sizes summed over the parts; ages the largest; ``store_up`` the smallest."""
    out = Snapshot()
    if not snapshots:
        return out
    for f in fields(Snapshot):
        values = [getattr(s, f.name) for s in snapshots.values()]
        if f.name in MAX_FIELDS:
            setattr(out, f.name, max(values))
        elif f.name in MIN_FIELDS:
            setattr(out, f.name, min(values))
        else:
            setattr(out, f.name, sum(values))
    return out


class EveryPart(Metrics):
    """A :class:`Metrics` whose ``set`` and ``inc`` go to every part's metrics: the worker's own
    numbers (the store breaker's ``store_up`` and ``store_outages``)."""

    def __init__(self, parts: list[Metrics]) -> None:
        super().__init__(stream="*", group="*", consumer="*")
        self.parts = parts

    def set(self, name: str, value: float) -> None:
        super().set(name, value)
        for metrics in self.parts:
            metrics.set(name, value)

    def inc(self, name: str, amount: int = 1) -> None:
        super().inc(name, amount)
        for metrics in self.parts:
            metrics.inc(name, amount)


class WorkerMetrics:
    """Every part's :class:`Metrics` of one worker (keyed by the part's stream key), one endpoint, totals."""

    def __init__(self, parts: Mapping[str, Metrics]) -> None:
        self.parts = dict(parts)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_MergedCollector(self))

    @property
    def values(self) -> Snapshot:
        """A plain stream's live numbers (the object its counters add to); over shards, the totals now."""
        if len(self.parts) == 1:
            return next(iter(self.parts.values())).values
        return self.total()

    def snapshots(self) -> dict[str, Snapshot]:
        return {name: m.snapshot() for name, m in self.parts.items()}

    def total(self) -> Snapshot:
        return total(self.snapshots())

    def line(self) -> str:
        """The log line: the totals, then (shards only) each shard's processed, pending and lag."""
        if len(self.parts) <= 1:
            return self.total().line()
        parts = [
            f"{name}:processed={s.processed},pending={s.pending:.0f},lag={format_gauge(s.group_lag)}"
            for name, s in self.snapshots().items()
        ]
        return f"{self.total().line()} | shards {' '.join(parts)}"

    def serve(self, port: int, host: str = DEFAULT_HOST) -> None:
        """Serve every part's series on one ``/metrics`` (``host:port``)."""
        start_http_server(port, addr=host, registry=self.registry)
        shards = f" of {len(self.parts)} shards" if len(self.parts) > 1 else ""
        log.info("prometheus metrics%s on http://%s:%s/metrics", shards, host, port)


class _MergedCollector(Collector):
    """One family per metric name, with every part's samples (a registry refuses two families of one name)."""

    def __init__(self, owner: WorkerMetrics) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for metrics in self.owner.parts.values():
            for family in metrics.registry.collect():
                into = merged.get(family.name)
                if into is None:
                    merged[family.name] = into = Metric(family.name, family.documentation, family.type, family.unit)
                into.samples.extend(family.samples)
        yield from merged.values()


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
    return max(0.0, now_s - id_ms(first_id) / 1000)
