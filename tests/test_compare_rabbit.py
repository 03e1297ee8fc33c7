"""labs/compare on RabbitMQ (3 nodes, a quorum queue): the contract's semantics, never absolute timings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from compare_support import SETTINGS, run, sites_for

from labs.compare.scenarios import Case
from labs.compare.sites import Site


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    for sites in sites_for(("rabbitmq",), tmp_path_factory.mktemp("rabbitmq")):
        yield sites.sites["rabbitmq"]


def test_a_poison_message_is_dead_lettered_after_max_attempts_the_others_charged(site: Site, work: Path) -> None:
    row = run(site, Case("poison", 20, poison=True), work)
    assert row["poison_dead_lettered"] and row["poison_attempts"] == SETTINGS.max_attempts
    assert row["charged"] == 19 and row["lost"] == 0 and row["charged_twice"] == 0


def test_a_consumer_killed_between_charge_and_ack_is_redelivered_and_absorbed(site: Site, work: Path) -> None:
    row = run(site, Case("consumer-kill", 20, crash_consumer=True), work)
    assert row["duplicates_absorbed"] >= 1 and row["charged_twice"] == 0
    assert row["charged"] == 20 and row["crash_redelivered_after_s"] is not None


def test_a_leader_kill_under_load_loses_no_confirmed_event(site: Site, work: Path) -> None:
    # the last test of the module: the killed node stays down (a restart costs half a minute)
    row = run(site, Case("leader-kill", 40, rate_per_s=40, kill_leader_at_s=0.3, restart_killed=False), work)
    assert row["lost"] == 0 and row["confirmed"] == 40 and row["charged_twice"] == 0
    assert row["killed_port"] and row["charged"] == 40
