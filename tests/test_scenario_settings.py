"""labs.experiments.scenario_settings: every scenario's settings are the one base with its own changes."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from labs.experiments import cluster_worker, pool_and_dlq, scenario_settings, worker_crash, worker_runs
from solutions.settings import Settings

URL = "redis://127.0.0.1:6399/0"
LEDGER = Path("ledger.sqlite3")


def _changed(base: Settings, settings: Settings) -> dict[str, object]:
    return {f.name: getattr(settings, f.name) for f in fields(Settings)
            if getattr(settings, f.name) != getattr(base, f.name)}


def test_each_scenario_names_only_what_it_changes() -> None:
    base = scenario_settings.base("s", LEDGER, redis_url=URL)
    assert (base.group, base.block_ms, base.metrics_interval_s, base.redis_url) == ("billing", 200, 60.0, URL)
    assert _changed(base, pool_and_dlq.base_settings(URL, "s", LEDGER)) == {"order_key": ""}
    assert _changed(base, worker_crash.rescuer_settings(URL, "s", "redis", LEDGER)) == {
        "consumer": worker_crash.RESCUER, "dedupe": "redis", "handler_delay_ms": 5, "min_idle_ms": 300,
        "claim_interval_ms": 100, "order_key": ""}
    bench = worker_runs.bench_settings(URL, "s", dedupe="none", ledger=LEDGER, parallelism=4, count=8, delay_ms=1)
    assert _changed(base, bench) == {
        "consumer": "bench-worker", "dedupe": "none", "parallelism": 4, "count": 8, "block_ms": 500,
        "handler_delay_ms": 1, "rescuer": False, "metrics_interval_s": 3600.0, "drain_timeout_s": 10.0}


def test_the_cluster_scenarios_start_from_the_same_base() -> None:
    startup = [("127.0.0.1", 7000)]
    settings = cluster_worker.worker_settings(startup, "s", 3, LEDGER)
    assert _changed(scenario_settings.base("s", LEDGER, cluster=startup), settings) == {
        "shards": 3, "consumer": "w1", "handler_delay_ms": 5, "block_ms": 500, "min_idle_ms": 1500,
        "claim_interval_ms": 250, "drain_timeout_s": 10.0, "ledger_busy_timeout_ms": 5000}
    assert cluster_worker.worker_settings(startup, "s", 3, LEDGER, parallelism=2) == replace(settings, parallelism=2)


def test_a_wrong_change_fails_where_it_is_written() -> None:
    with pytest.raises(ValueError, match="invalid settings"):
        replace(scenario_settings.base("s", LEDGER, redis_url=URL), parallelism=0)
