"""labs.lab3.checks on made-up cells: the verdicts' rules, without running a lab."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from labs.lab3.checks import check_failover_recovered, check_other_shards_kept_charging
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


def _resumed(variant: str, first_charge_s: float | None, back_after_s: float | None) -> Run:
    result = SimpleNamespace(recover_first_charge_s=first_charge_s)
    record = SimpleNamespace(promoted_t=1003.0, fault_t=1000.0,
                             replica_back_t=None if back_after_s is None else 1000.0 + back_after_s)
    cell: Any = SimpleNamespace(variant=variant, strategy="redis", repeat=1, mode="failover", result=result,
                                record=record)
    return cast(Run, cell)


def test_a_producer_that_waits_for_a_replica_is_timed_from_the_replica_s_return() -> None:
    # CI (stop 43's run before): failover+wait charged nothing new until the old master was back, 20 s late.
    late_replica = check_failover_recovered([_resumed("failover", 12.0, 27.0), _resumed("failover+wait", 30.0, 27.0)])
    assert late_replica is not None and late_replica.passed, late_replica
    plain_late = check_failover_recovered([_resumed("failover", 30.0, 27.0)])  # no WAIT: no excuse
    assert plain_late is not None and not plain_late.passed and "bound 20.0 s" in plain_late.detail, plain_late
    stuck = check_failover_recovered([_resumed("failover+wait", 60.0, 27.0)])
    assert stuck is not None and not stuck.passed and "bound 47.0 s" in stuck.detail, stuck
    never = check_failover_recovered([_resumed("failover+wait", None, 27.0)])
    assert never is not None and not never.passed, never
    unknown = check_failover_recovered([_resumed("failover+wait", 15.0, None)])  # no return recorded: 20 s
    assert unknown is not None and unknown.passed, unknown
