"""The worker's numbers: counters and gauges, logged every N seconds and served to Prometheus.

Counters: processed, errors, reclaimed, dead-lettered, dedupe-skipped (plus acked and the
deleted ids the rescuer found). Gauges: the group's pending and lag (``XINFO GROUPS``), the
stream's length (``XLEN``) and age (the first entry's id against now), and the processing
lag (now against the timestamp in the id of the last processed message).

Each :class:`Metrics` has a registry of its own, so several workers can live in one process
(a notebook) without clashing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

COUNTERS = ("processed", "errors", "reclaimed", "dead_lettered", "dedupe_skipped", "acked", "deleted")
GAUGES = ("pending", "group_lag", "stream_length", "stream_age_s", "processing_lag_s")


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
    pending: float = 0.0
    group_lag: float = 0.0
    stream_length: float = 0.0
    stream_age_s: float = 0.0
    processing_lag_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def line(self) -> str:
        """``name=value`` pairs for the log (gauges with up to 3 decimals)."""
        return " ".join(f"{k}={_short(v)}" for k, v in self.as_dict().items())


def _short(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}"


class Metrics:
    """Counters and gauges for one worker (labels: stream, group, consumer).

    The hot path only adds to plain integers; Prometheus reads them when it scrapes,
    through a collector, so counting costs nothing per message beyond an addition.
    """

    def __init__(self, *, stream: str, group: str, consumer: str) -> None:
        self.values = Snapshot()
        self.labels = {"stream": stream, "group": group, "consumer": consumer}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Collector(self))

    def inc(self, name: str, amount: int = 1) -> None:
        """Add to one of :data:`COUNTERS`."""
        setattr(self.values, name, getattr(self.values, name) + amount)

    def set(self, name: str, value: float) -> None:
        """Set one of :data:`GAUGES`."""
        setattr(self.values, name, float(value))

    def observe_processed(self, msg_id: str) -> None:
        """Count a processed message and its processing lag (now minus the id's timestamp)."""
        values = self.values
        values.processed += 1
        values.processing_lag_s = max(0.0, time.time() - int(msg_id.split("-", 1)[0]) / 1000)

    def observe_batch(self, n: int, last_msg_id: str) -> None:
        """:meth:`observe_processed` for ``n`` messages at once; the lag is the last one's."""
        values = self.values
        values.processed += n
        values.processing_lag_s = max(0.0, time.time() - int(last_msg_id.split("-", 1)[0]) / 1000)

    def snapshot(self) -> Snapshot:
        return Snapshot(**self.values.as_dict())

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` for Prometheus on ``port``."""
        start_http_server(port, registry=self.registry)
        log.info("prometheus metrics on http://0.0.0.0:%s/metrics", port)


class _Collector(Collector):
    """Exposes a :class:`Metrics` as ``billing_<counter>_total`` and ``billing_<gauge>``."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        names, values = list(self.metrics.labels), list(self.metrics.labels.values())
        snapshot = self.metrics.values
        for name in COUNTERS:
            counter = CounterMetricFamily(f"billing_{name}", f"messages {name.replace('_', ' ')}", labels=names)
            counter.add_metric(values, getattr(snapshot, name))
            yield counter
        for name in GAUGES:
            gauge = GaugeMetricFamily(f"billing_{name}", name.replace("_", " "), labels=names)
            gauge.add_metric(values, getattr(snapshot, name))
            yield gauge


def group_numbers(groups: list[dict[Any, Any]], group: str) -> tuple[int, int]:
    """``(pending, lag)`` of ``group`` from an ``XINFO GROUPS`` reply (lag may be unknown: 0)."""
    for info in groups:
        name = info.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == group:
            return int(info.get("pending") or 0), int(info.get("lag") or 0)
    return 0, 0


def stream_age_s(first_id: bytes | str | None, now_s: float) -> float:
    """How old the oldest entry is: now minus the timestamp in its id (0 for an empty stream)."""
    if first_id is None:
        return 0.0
    text = first_id.decode() if isinstance(first_id, bytes) else first_id
    return max(0.0, now_s - int(text.split("-", 1)[0]) / 1000)
