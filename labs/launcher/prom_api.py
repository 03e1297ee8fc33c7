"""A small client of Prometheus's HTTP API: targets, alerts, instant and range queries.

Only the standard library (``urllib``); every call has a timeout and raises
:class:`~labs.launcher.errors.LauncherError` with one line when Prometheus does not answer or
answers with an error.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Required, TypedDict

from labs.launcher.errors import LauncherError
from labs.polling import wait_until

TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Alert:
    """One alert of ``/api/v1/alerts``: its name, state (pending or firing), labels and since when."""

    name: str
    state: str
    labels: dict[str, str]
    active_at: str  # RFC 3339, when it became pending

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "")


@dataclass(frozen=True)
class Target:
    """One scrape target of ``/api/v1/targets``."""

    job: str
    url: str
    health: str  # up, down or unknown (not scraped yet)
    labels: dict[str, str]
    last_error: str


class Series(TypedDict, total=False):
    """One series of a query's ``result``: its labels, and its ``[unix time, "value"]`` pair (an instant
    query) or pairs (a range query, or an instant query of a range selector)."""

    metric: Required[dict[str, str]]
    value: tuple[float, str]
    values: list[tuple[float, str]]


class PrometheusAPI:
    """``PrometheusAPI("http://127.0.0.1:9390")``."""

    def __init__(self, base_url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.base_url}/api/v1/{path}{query}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as exc:
            body = _error_body(exc)
        except (urllib.error.URLError, OSError) as exc:
            raise LauncherError(f"Prometheus at {self.base_url} does not answer: {exc}") from None
        if body.get("status") != "success":
            raise LauncherError(f"Prometheus refused {path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def targets(self) -> list[Target]:
        data = self.get("targets", state="active")
        return [
            Target(t["labels"].get("job", ""), t["scrapeUrl"], t["health"], dict(t["labels"]), t.get("lastError", ""))
            for t in data["activeTargets"]
        ]

    def alerts(self) -> list[Alert]:
        return [
            Alert(a["labels"].get("alertname", ""), a["state"], dict(a["labels"]), a.get("activeAt", ""))
            for a in self.get("alerts")["alerts"]
        ]

    def firing(self, name: str | None = None) -> list[Alert]:
        """Firing alerts (of one name)."""
        return [a for a in self.alerts() if a.state == "firing" and (name is None or a.name == name)]

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        """An instant query; the ``result`` list (``metric`` and ``value`` or ``values``)."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        return list(self.get("query", **params)["result"])

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Series]:
        """A range query from ``start`` to ``end`` (unix seconds); ``result`` with ``values`` lists."""
        return list(
            self.get("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step_s:g}")["result"]
        )

    def wait_for(self, name: str, *, timeout_s: float, poll_s: float = 0.5, **labels: str) -> tuple[Alert, float]:
        """Poll until alert ``name`` (with these labels) fires; (the alert, ``time.time()`` when seen)."""

        def fired() -> tuple[Alert, float] | None:
            matching = (a for a in self.firing(name) if all(a.labels.get(k) == v for k, v in labels.items()))
            alert = next(matching, None)
            return None if alert is None else (alert, time.time())

        def shown() -> str:
            return f"{name} {labels or ''} to fire; alerts now: " + (
                ", ".join(f"{a.name}:{a.state}" for a in self.alerts()) or "none")

        return wait_until(fired, timeout_s, shown, poll_s)

    def fired_at(self, name: str, lookback_s: float = 600.0, *, after: float = 0.0, **labels: str) -> float | None:
        """The unix time of the first evaluation (after ``after``) at which ``name`` was firing (``ALERTS``)."""
        wanted = {"alertname": name, "alertstate": "firing", **labels}
        matchers = ",".join(f"{k}={json.dumps(v)}" for k, v in wanted.items())
        result = self.query(f"ALERTS{{{matchers}}}[{max(1, int(lookback_s + 0.999))}s]")
        stamps = [float(ts) for series in result for ts, _ in series.get("values", []) if float(ts) >= after]
        return min(stamps) if stamps else None


def _error_body(exc: urllib.error.HTTPError) -> dict[str, object]:
    try:
        return dict(json.load(exc))
    except (ValueError, OSError):
        return {"status": "error", "errorType": f"HTTP {exc.code}", "error": exc.reason}
