"""labs.lab3.checks on made-up cells: the verdicts' rules, without running a lab."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from labs.lab3.checks import check_other_shards_kept_charging
from labs.lab3.runner import Run

pytestmark = pytest.mark.timeout(30)


def _failover(stops: list[float | None], hit: list[int]) -> Run:
    result = SimpleNamespace(shard_downtime_s=stops, hit_shards=hit)
    cell: Any = SimpleNamespace(variant="failover", strategy="sqlite", repeat=1, mode="failover", result=result)
    return cast(Run, cell)


def test_the_other_shards_may_pause_but_not_like_the_failed_over_one() -> None:
    check = check_other_shards_kept_charging([_failover([2.9, 0.4, 0.6], hit=[0])])
    assert check is not None and check.passed, check
    loaded = check_other_shards_kept_charging([_failover([2.9, 1.29, 0.7], hit=[0])])  # a busy machine: CI
    assert loaded is not None and loaded.passed, loaded
    stalled = check_other_shards_kept_charging([_failover([2.9, 2.5, 0.7], hit=[0])])  # waited with the hit one
    assert stalled is not None and not stalled.passed and "shard 1 stopped 2.50 s" in stalled.detail
    never = check_other_shards_kept_charging([_failover([2.9, None, 0.7], hit=[0])])
    assert never is not None and not never.passed and "never charged" in never.detail


def test_no_hit_shard_is_not_exercised_and_no_failover_is_no_verdict() -> None:
    unhit = check_other_shards_kept_charging([_failover([0.3, 0.4, 0.6], hit=[])])
    assert unhit is not None and not unhit.passed and "no shard's master was taken away" in unhit.detail
    assert check_other_shards_kept_charging([]) is None
