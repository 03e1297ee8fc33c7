"""One scrape of a worker's Prometheus endpoint, turned into the numbers course §3.6 asks for.

``fetch_metrics`` GETs ``/metrics`` with a short timeout and parses the text exposition with
``prometheus_client.parser.text_string_to_metric_families``; :func:`worker_numbers` picks the
billing worker's series out of it. Series are looked up by a short list of accepted names
(:data:`SERIES`), so a worker that spells them ``billing_stream_age_seconds`` or the older
``billing_stream_age_s`` both work, and the processing lag may be a gauge (the last message's
lag) or a histogram (``_sum`` / ``_count``: a mean over any interval between two scrapes),
or both (``billing_processing_lag_seconds`` beside ``billing_last_processing_lag_seconds``).
Values of one series with several label sets (several workers behind one endpoint) are summed.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 1.0

# What we show -> the series names we accept, first match wins.
SERIES: dict[str, tuple[str, ...]] = {
    "processed": ("billing_processed_total",),
    "errors": ("billing_errors_total", "billing_process_errors_total"),
    "reclaimed": ("billing_reclaimed_total",),
    "dead_lettered": ("billing_dead_lettered_total",),
    "pending": ("billing_pending", "billing_pending_messages", "billing_pending_size"),
    "group_lag": ("billing_group_lag", "billing_group_lag_messages"),
    "stream_length": ("billing_stream_length", "billing_stream_length_messages"),
    "stream_age_s": ("billing_stream_age_seconds", "billing_stream_age_s"),
}
PROCESSING_LAG = ("billing_processing_lag_seconds", "billing_processing_lag_s")
LAST_PROCESSING_LAG = ("billing_last_processing_lag_seconds",)


class ScrapeError(RuntimeError):
    """The endpoint did not answer, or answered something that is not the exposition format."""


def fetch_metrics(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, float]:
    """GET ``url`` and flatten it with :func:`parse_metrics`."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", errors="replace")
    except (OSError, ValueError) as exc:
        raise ScrapeError(f"{url}: {exc}") from exc
    return parse_metrics(text)


def parse_metrics(text: str) -> dict[str, float]:
    """Text exposition -> ``{sample name: value}``, values summed over label sets.

    Histogram buckets keep their bound: ``name_bucket{le="0.25"}``; ``_created`` series are left out.
    """
    flat: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = sample.name
                if key.endswith("_bucket"):
                    key = f'{key}{{le="{sample.labels.get("le", "+Inf")}"}}'
                flat[key] = flat.get(key, 0.0) + float(sample.value)
    except ValueError as exc:
        raise ScrapeError(f"not the Prometheus text format: {exc}") from exc
    return flat


@dataclass(frozen=True)
class WorkerNumbers:
    """The worker's own view (None: the endpoint does not export that series)."""

    processed: float | None = None
    errors: float | None = None
    reclaimed: float | None = None
    dead_lettered: float | None = None
    pending: float | None = None
    group_lag: float | None = None
    stream_length: float | None = None
    stream_age_s: float | None = None
    lag_last_s: float | None = None  # a gauge: the lag of the last processed message
    lag_sum_s: float | None = None  # a histogram: sum and count of every observed lag
    lag_count: float | None = None
    lag_buckets: tuple[tuple[float, float], ...] = ()  # (upper bound, cumulative count), ascending

    @property
    def lag_mean_s(self) -> float | None:
        """Mean processing lag since the worker started (histogram), else the gauge."""
        if self.lag_sum_s is not None and self.lag_count:
            return self.lag_sum_s / self.lag_count
        return self.lag_last_s

    def lag_since(self, before: WorkerNumbers | None) -> float | None:
        """Mean processing lag of the messages handled since ``before`` (histogram), else the gauge."""
        if self.lag_sum_s is None:
            return self.lag_last_s
        if before is None or before.lag_sum_s is None:
            return self.lag_mean_s
        count = (self.lag_count or 0) - (before.lag_count or 0)
        return (self.lag_sum_s - before.lag_sum_s) / count if count > 0 else None


def _first(flat: dict[str, float], names: tuple[str, ...]) -> float | None:
    return next((flat[name] for name in names if name in flat), None)


def worker_numbers(flat: dict[str, float]) -> WorkerNumbers:
    """Pick the billing series out of a flattened scrape."""
    values: dict[str, Any] = {key: _first(flat, names) for key, names in SERIES.items()}
    last = _first(flat, LAST_PROCESSING_LAG)
    lag_name = next((n for n in PROCESSING_LAG if n in flat or f"{n}_count" in flat), None)
    if lag_name is not None and f"{lag_name}_count" in flat:
        return WorkerNumbers(
            **values, lag_last_s=last, lag_sum_s=flat.get(f"{lag_name}_sum"), lag_count=flat[f"{lag_name}_count"],
            lag_buckets=_buckets(flat, lag_name),
        )
    return WorkerNumbers(**values, lag_last_s=flat.get(lag_name) if lag_name else last)


def _buckets(flat: dict[str, float], name: str) -> tuple[tuple[float, float], ...]:
    prefix = f'{name}_bucket{{le="'
    pairs = [(float(key[len(prefix):-2]), value) for key, value in flat.items() if key.startswith(prefix)]
    return tuple(sorted(pairs))


@dataclass(frozen=True)
class Quantile:
    """A quantile estimated from histogram buckets, and the bucket it falls in."""

    value: float
    lower: float
    upper: float


def histogram_quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> Quantile | None:
    """Prometheus's ``histogram_quantile``: find the bucket holding rank ``q * total`` and
    interpolate linearly inside it (the lowest bucket starts at 0; a rank in ``+Inf`` gives the
    highest finite bound). None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return Quantile(lower, lower, upper)
            share = (rank - below) / (count - below) if count > below else 1.0
            return Quantile(lower + (upper - lower) * share, lower, upper)
        lower, below = upper, count
    return None


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> WorkerNumbers:
    """:func:`fetch_metrics` then :func:`worker_numbers`."""
    return worker_numbers(fetch_metrics(url, timeout_s))
