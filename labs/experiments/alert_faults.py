"""Live faults against the monitoring add-on: which alert fires, how long after the fault, and what stays quiet.

Notebook 10 and ``tests/test_alert_faults.py`` cause real faults on real processes (workers
stopped, a master killed with SIGKILL, memory filled under ``noeviction``, a planned failover)
and read the answer only from Prometheus's HTTP API (``/api/v1/alerts``, and the ``ALERTS``
series for the evaluation at which an alert started firing). Every wait polls with a deadline.

- :func:`wait_fired` waits until each expected alert fires and returns when it did;
- :func:`watch_quiet` watches a window and returns every alert that is not ``info``;
- :class:`MemoryFiller` is the producer of the memory experiment: it ``XADD`` s 1 KB entries at
  a steady byte rate and records the moment it meets its first ``OOM`` error;
- :func:`set_maxmemory_at` puts ``maxmemory`` just above what the server uses now.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import redis

from labs.launcher.prom_api import Alert, PrometheusAPI
from labs.polling import every, wait_until

POLL_S = 0.5
ENTRY_BYTES = 1024


@dataclass(frozen=True)
class Fired:
    """One alert that fired after a fault."""

    alert: str
    labels: dict[str, str]
    fault_at: float  # time.time() of the fault
    fired_at: float  # the rule evaluation at which it started firing (the ALERTS series)
    seen_at: float  # when /api/v1/alerts first showed it firing

    @property
    def delay_s(self) -> float:
        """From the fault to the evaluation that fired it."""
        return self.fired_at - self.fault_at


def _matches(alert: Alert, labels: Mapping[str, str]) -> bool:
    return all(alert.labels.get(k) == v for k, v in labels.items())


def wait_fired(
    api: PrometheusAPI, expected: Mapping[str, Mapping[str, str]], *, fault_at: float, timeout_s: float
) -> dict[str, Fired]:
    """Poll ``/api/v1/alerts`` until every alert of ``expected`` (name -> labels to match) fires.

    Raises TimeoutError naming what did not fire (and what the alerts are) at the deadline.
    """
    seen: dict[str, tuple[Alert, float]] = {}

    def all_fired() -> bool:
        now = time.time()
        for alert in api.firing():
            if alert.name in expected and alert.name not in seen and _matches(alert, expected[alert.name]):
                seen[alert.name] = (alert, now)
        return len(seen) == len(expected)

    def missing() -> str:
        states = ", ".join(f"{a.name}:{a.state}" for a in api.alerts()) or "none"
        return f"{sorted(set(expected) - set(seen))} to fire; alerts now: {states}"

    wait_until(all_fired, timeout_s, missing, POLL_S)
    return {name: _fired(api, alert, seen_at, fault_at) for name, (alert, seen_at) in seen.items()}


def _fired(api: PrometheusAPI, alert: Alert, seen_at: float, fault_at: float) -> Fired:
    """The first ``ALERTS{alertstate="firing"}`` sample after the fault (else the moment it was seen)."""
    identity = {k: v for k, v in alert.labels.items() if k != "alertname"}
    lookback_s = time.time() - fault_at + 1
    fired_at = api.fired_at(alert.name, lookback_s, after=fault_at, **identity)
    return Fired(alert.name, alert.labels, fault_at, fired_at if fired_at is not None else seen_at, seen_at)


@dataclass(frozen=True)
class QuietWindow:
    """What a watch window saw: false alarms (``loud``: fired, not info), ``pending`` ones, ``info``.

    A pending alert is not an alarm: its condition held for less than its ``for:``, which is
    exactly what ``for:`` is there to absorb; it is kept to show how close it came.
    """

    loud: list[Alert]
    pending: list[Alert]
    info: list[Alert]


def about_streams(prefix: str) -> Callable[[Alert], bool]:
    """Alerts that concern this experiment: every Redis alert, and stream alerts on streams under ``prefix``."""
    return lambda alert: "stream" not in alert.labels or alert.labels["stream"].startswith(prefix)


def watch_quiet(
    api: PrometheusAPI, watch_s: float, *, relevant: Callable[[Alert], bool] = lambda _: True
) -> QuietWindow:
    """Watch ``/api/v1/alerts`` for ``watch_s``: every relevant alert, by kind (see :class:`QuietWindow`)."""
    seen: dict[str, dict[tuple[str, str], Alert]] = {"loud": {}, "pending": {}, "info": {}}
    for _ in every(POLL_S, watch_s):
        for alert in filter(relevant, api.alerts()):
            kind = "info" if alert.severity == "info" else "loud" if alert.state == "firing" else "pending"
            seen[kind][(alert.name, repr(sorted(alert.labels.items())))] = alert
    return QuietWindow(*(list(seen[k].values()) for k in ("loud", "pending", "info")))


# -- memory -----------------------------------------------------------------------------------


def counted_memory(client: redis.Redis) -> int:
    """Memory as ``maxmemory`` counts it: ``used_memory`` minus replica and AOF buffers (INFO memory)."""
    info = client.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_not_counted_for_evict", 0))


def set_maxmemory_at(client: redis.Redis, ratio: float, policy: str = "noeviction") -> int:
    """``CONFIG SET maxmemory`` so that what the server uses now is ``ratio`` of it; the bytes set."""
    if not 0 < ratio < 1:
        raise ValueError(f"ratio {ratio} must be between 0 and 1")
    maxmemory = int(counted_memory(client) / ratio)
    client.config_set("maxmemory-policy", policy)
    client.config_set("maxmemory", maxmemory)
    return maxmemory


@contextlib.contextmanager
def memory_limit(client: redis.Redis, ratio: float, policy: str = "noeviction") -> Iterator[int]:
    """:func:`set_maxmemory_at` for a block; afterwards maxmemory 0 and the old policy again."""
    old_policy = str(client.config_get("maxmemory-policy")["maxmemory-policy"])
    try:
        yield set_maxmemory_at(client, ratio, policy)
    finally:
        client.config_set("maxmemory", 0)
        client.config_set("maxmemory-policy", old_policy)


@dataclass(eq=False)
class MemoryFiller(threading.Thread):
    """A producer that ``XADD`` s entries of 1 KB to ``stream`` at ``bytes_per_s`` until Redis says OOM."""

    url: str
    stream: str
    bytes_per_s: float
    max_s: float = 60.0
    written: int = 0
    first_oom_at: float | None = None  # time.time() of the first OOM reply
    first_oom_error: str = ""
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name=f"memory-filler-{self.stream}", daemon=True)

    def run(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=5)
        payload = "x" * ENTRY_BYTES
        try:
            for _ in every(ENTRY_BYTES / self.bytes_per_s, self.max_s, self.stop_event, catch_up=True):
                try:
                    client.xadd(self.stream, {"payload": payload})
                except redis.exceptions.OutOfMemoryError as exc:
                    self.first_oom_at, self.first_oom_error = time.time(), f"OOM {exc}"
                    return
                self.written += 1
        finally:
            client.close()
