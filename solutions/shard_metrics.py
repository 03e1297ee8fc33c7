"""The numbers of a sharded worker: one :class:`~solutions.metrics.Metrics` per shard, one endpoint, totals.

Each shard of a stream (``orders:{0}``, ``orders:{1}`` ...) keeps its own counters and gauges, so
that a dashboard shows which shard stalls. On ``/metrics`` every series of a shard carries the
usual labels with ``stream`` set to the shard's key (the key Redis and redis_exporter know, so a
join ``on (stream, group)`` with the exporter's series works per shard) and one more label,
``shard``: the shard's index in the stream's shard set (``"0"`` .. ``"N-1"``). The metric names
are those of :mod:`solutions.metrics`; a single-stream worker has no ``shard`` label at all, so
its series are unchanged. The totals over the shards are a PromQL ``sum``:

    sum without (stream, shard) (billing_group_lag)       # the group's lag over every shard
    sum by (shard) (rate(billing_processed_total[1m]))    # throughput per shard

and :meth:`ShardMetrics.total` for the log line and for Python (a notebook, a test).

The business store is one for every shard, and an outage pauses them all: ``store_up`` and
``store_outages`` are set on every shard alike (:class:`EveryShard`), so read them with ``max``
(``max without (stream, shard) (billing_store_outages_total)``), not ``sum``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import fields

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from solutions.metrics import Metrics, Snapshot, format_gauge

log = logging.getLogger(__name__)

SHARD_LABEL = "shard"
# The oldest, the latest; and the store's outages, counted on every shard alike (EveryShard).
MAX_FIELDS = frozenset({"stream_age_s", "processing_lag_s", "store_outages"})
MIN_FIELDS = frozenset({"store_up"})  # one store for every shard


def shard_metrics(*, shard: str, index: int, group: str, consumer: str) -> Metrics:
    """The metrics of one shard: ``stream`` is the shard's key, ``shard`` its index."""
    metrics = Metrics(stream=shard, group=group, consumer=consumer)
    metrics.labels[SHARD_LABEL] = str(index)
    return metrics


def total(snapshots: Mapping[str, Snapshot]) -> Snapshot:
    """Counters and sizes summed over the shards; ages the largest; ``store_up`` the smallest."""
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


class EveryShard(Metrics):
    """A :class:`Metrics` whose ``set`` and ``inc`` go to every shard's metrics: the worker's own
    numbers (the store breaker's ``store_up`` and ``store_outages``)."""

    def __init__(self, shards: list[Metrics]) -> None:
        super().__init__(stream="*", group="*", consumer="*")
        self.shards = shards

    def set(self, name: str, value: float) -> None:
        super().set(name, value)
        for metrics in self.shards:
            metrics.set(name, value)

    def inc(self, name: str, amount: int = 1) -> None:
        super().inc(name, amount)
        for metrics in self.shards:
            metrics.inc(name, amount)


class ShardMetrics:
    """Every shard's :class:`Metrics` of one worker (keyed by the shard's name)."""

    def __init__(self, shards: Mapping[str, Metrics]) -> None:
        self.shards = dict(shards)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_MergedCollector(self))

    def snapshots(self) -> dict[str, Snapshot]:
        return {name: m.snapshot() for name, m in self.shards.items()}

    def total(self) -> Snapshot:
        return total(self.snapshots())

    def line(self) -> str:
        """The log line: the totals, then each shard's processed, pending and lag."""
        parts = [
            f"{name}:processed={s.processed},pending={s.pending:.0f},lag={format_gauge(s.group_lag)}"
            for name, s in self.snapshots().items()
        ]
        return f"{self.total().line()} | shards {' '.join(parts)}"

    def serve(self, port: int, host: str) -> None:
        """Serve every shard's series on one ``/metrics`` (``host:port``)."""
        start_http_server(port, addr=host, registry=self.registry)
        log.info("prometheus metrics of %s shards on http://%s:%s/metrics", len(self.shards), host, port)


class _MergedCollector(Collector):
    """One family per metric name, with every shard's samples (a registry refuses two families of one name)."""

    def __init__(self, owner: ShardMetrics) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for metrics in self.owner.shards.values():
            for family in metrics.registry.collect():
                into = merged.get(family.name)
                if into is None:
                    merged[family.name] = into = Metric(family.name, family.documentation, family.type, family.unit)
                into.samples.extend(family.samples)
        yield from merged.values()
