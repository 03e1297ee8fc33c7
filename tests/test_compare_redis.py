"""labs/compare on Redis Streams under Sentinel (AOF everysec), with and without WAIT 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from compare_support import SETTINGS, run, sites_for

from labs.compare.scenarios import Case
from labs.compare.sites import Sites


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sites]:
    yield from sites_for(("redis", "redis+WAIT"), tmp_path_factory.mktemp("redis"))


def test_a_poison_message_is_dead_lettered_after_max_attempts_by_the_consumer(sites: Sites, work: Path) -> None:
    row = run(sites.sites["redis"], Case("poison", 20, poison=True), work)
    assert row["poison_dead_lettered"] and row["poison_attempts"] == SETTINGS.max_attempts
    assert row["charged"] == 19 and row["lost"] == 0 and row["dead_lettered_by"] == "consumer"


def test_a_pipeline_of_xadds_with_one_wait_keeps_the_contract_on_three_copies(sites: Sites, work: Path) -> None:
    row = run(sites.sites["redis+WAIT"], Case("window-64", 300, hold=True, window=64), work)
    assert row["confirmed"] == 300 and row["lost"] == 0 and row["charged"] == 300 and row["charged_twice"] == 0
    assert row["copies"] == 3 and row["server"].startswith("Redis ") and "WAIT 1" in row["confirm"]


def test_a_consumer_killed_between_charge_and_ack_is_reclaimed_and_absorbed(sites: Sites, work: Path) -> None:
    row = run(sites.sites["redis"], Case("consumer-kill", 20, crash_consumer=True), work)
    assert row["duplicates_absorbed"] >= 1 and row["charged_twice"] == 0 and row["charged"] == 20


def test_with_wait_1_a_master_kill_loses_no_confirmed_event(sites: Sites, work: Path) -> None:
    row = run(sites.sites["redis+WAIT"], Case("leader-kill", 40, rate_per_s=40, kill_leader_at_s=0.3), work)
    assert "WAIT 1" in row["durability"] and "min-replicas-to-write 1" in row["confirm"]
    assert row["lost"] == 0 and row["confirmed"] == 40 and row["charged_twice"] == 0 and row["killed_port"]
