"""labs.compare.run's checks: what fails a report and what is a measurement (no broker started)."""

from __future__ import annotations

import pytest

from labs.compare.run import checks
from labs.compare.scenarios import Row

pytestmark = pytest.mark.timeout(30)


def _semantic(broker: str, case: str, **extra: object) -> Row:
    row: Row = {"broker": broker, "case": case, "lost": 0, "charged_twice": 0, "duplicates_absorbed": 0}
    return row | extra  # type: ignore[return-value]  # test rows with the case's own fields


def test_redis_without_wait_may_lose_at_a_partition_the_rows_that_wait_for_a_copy_may_not() -> None:
    rows = [_semantic("redis", "partition", lost=101, lost_cut_off_side=101),
            _semantic("redis+WAIT", "partition", lost=0), _semantic("rabbitmq", "partition", lost=3)]
    verdicts = {c.name: c.passed for c in checks(rows)}
    assert verdicts == {"partition on redis+WAIT: nothing acknowledged then lost": True,
                        "partition on rabbitmq: nothing acknowledged then lost": False}


def test_the_poison_check_wants_the_broker_to_move_it_where_the_broker_dead_letters() -> None:
    rows = [_semantic("rabbitmq", "poison", broker_dead_letters=True, dead_lettered_by="consumer",
                      poison_dead_lettered=True, poison_attempts=3),
            _semantic("nats", "poison", broker_dead_letters=False, dead_lettered_by="consumer",
                      poison_dead_lettered=True, poison_attempts=3)]
    poison = {c.name.split(":")[0]: c.passed for c in checks(rows) if "moved by" in c.name}
    assert poison == {"poison on rabbitmq": False, "poison on nats": True}


def test_a_row_that_failed_is_a_failed_check_with_its_error() -> None:
    (check,) = checks([{"broker": "nats", "case": "leader-kill", "error": "TimeoutError: no leader"}])
    assert not check.passed and "no leader" in check.detail
