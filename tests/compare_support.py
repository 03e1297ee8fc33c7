"""Shared by tests/test_compare_*.py: one cluster per broker per test module, cases run on it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from require_support import skip_area

from labs.compare.contract import Settings
from labs.compare.scenarios import Case, run_case
from labs.compare.sites import Site, Sites
from labs.launcher import rabbitmq

SETTINGS = Settings(max_attempts=3, prefetch=8, redeliver_after_ms=500, publish_timeout_s=2.0)


def require_brokers(kind: str) -> None:
    if kind == "rabbitmq" and not (rabbitmq.SBIN / "rabbitmq-server").exists() \
            and shutil.which("rabbitmq-server") is None:
        skip_area("brokers", "rabbitmq-server is not installed: make brokers-bin")
    if kind == "nats" and shutil.which("nats-server") is None and not Path("/usr/sbin/nats-server").exists():
        skip_area("brokers", "nats-server is not installed: make brokers-bin")


def sites_for(kinds: tuple[str, ...], tmp: Path) -> Iterator[Sites]:
    for kind in kinds:
        require_brokers(kind)
    sites = Sites(tmp / "run")
    try:
        yield sites.start(kinds)
    finally:
        sites.stop()


def run(site: Site, case: Case, work: Path, settings: Settings = SETTINGS) -> dict[str, Any]:
    return asyncio.run(run_case(site, case, settings, work))
