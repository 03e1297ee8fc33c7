"""Shared by tests/test_compare_*.py: one cluster per broker per test module, cases run on it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from require_support import skip_area

from labs.compare.contract import Settings
from labs.compare.scenarios import Case, run_case
from labs.compare.sites import Site, Sites
from labs.launcher import rabbitmq

SETTINGS = Settings(max_attempts=3, prefetch=8, redeliver_after_ms=500, publish_timeout_s=2.0)
BROKER_MOVES_DEAD_LETTERS = {"rabbitmq"}  # x-delivery-limit + DLX; the others' consumer moves them


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


class BrokerContract:
    """The contract's checks every broker passes, in this order; a test module subclasses it as
    ``Test<Broker>`` with its broker's ``kind`` (one cluster per class, started once)."""

    kind = ""
    restart_killed = True  # False: the killed node stays down (RabbitMQ's restart costs half a minute)

    @pytest.fixture(scope="class")
    @classmethod
    def work(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        return tmp_path_factory.mktemp("work")

    @pytest.fixture(scope="class")
    @classmethod
    def site(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
        for sites in sites_for((cls.kind,), tmp_path_factory.mktemp(cls.kind)):
            yield sites.sites[cls.kind]

    def test_a_poison_message_is_dead_lettered_after_max_attempts_the_others_charged(self, site: Site,
                                                                                    work: Path) -> None:
        row = run(site, Case("poison", 20, poison=True), work)
        assert row["poison_dead_lettered"] and row["poison_attempts"] == SETTINGS.max_attempts, row
        assert row["charged"] == 19 and row["lost"] == 0 and row["charged_twice"] == 0
        who = "broker" if self.kind in BROKER_MOVES_DEAD_LETTERS else "consumer"
        assert row["dead_lettered_by"] == who, (row["dead_lettered_by"], who)

    def test_a_window_of_publishes_keeps_the_contract(self, site: Site, work: Path) -> None:
        row = run(site, Case("window-64", 300, hold=True, window=64), work)
        assert row["confirmed"] == 300 and row["lost"] == 0 and row["charged"] == 300, row
        assert row["charged_twice"] == 0 and row["window"] == 64
        assert row["copies"] == 3 and row["server"] and row["fsync"] and row["confirm"]

    def test_a_consumer_killed_between_charge_and_ack_is_redelivered_and_absorbed(self, site: Site,
                                                                                 work: Path) -> None:
        row = run(site, Case("consumer-kill", 20, crash_consumer=True), work)
        assert row["duplicates_absorbed"] >= 1 and row["charged_twice"] == 0
        assert row["charged"] == 20 and row["crash_redelivered_after_s"] is not None

    def test_a_leader_kill_under_load_loses_no_confirmed_event(self, site: Site, work: Path) -> None:
        case = Case("leader-kill", 40, rate_per_s=40, kill_leader_at_s=0.3, restart_killed=self.restart_killed)
        row = run(site, case, work)
        assert row["lost"] == 0 and row["confirmed"] == 40 and row["charged_twice"] == 0
        assert row["killed_port"] and row["charged"] == 40
