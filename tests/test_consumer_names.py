"""labs.experiments.consumer_names: the hard-coded name glues PELs, host-pid leaves dead consumers."""

from __future__ import annotations

import pytest
import redis

from labs.experiments.consumer_names import (
    consumers,
    delconsumer,
    reap_idle_consumers,
    restart,
    restarts_pile_up,
    twins,
)
from labs.experiments.read_loop import GROUP, poll

pytestmark = pytest.mark.timeout(30)


def test_a_hard_coded_name_glues_the_dead_process_pel_to_its_successor(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    run = restart(redis_client, f"{key_prefix}s", dead="billing-1", successor="billing-1", held=3, new=2)
    assert run.consumers == {"billing-1": 5}  # one name, old and new mixed
    assert run.successor_reread == run.dead_held  # the successor got the dead one's entries


def test_host_pid_names_keep_the_dead_pel_apart(redis_client: redis.Redis, key_prefix: str) -> None:
    run = restart(redis_client, f"{key_prefix}s", dead="host-101", successor="host-202", held=3, new=2)
    assert run.consumers == {"host-101": 3, "host-202": 2}
    assert run.successor_reread == []  # a restarted process never re-reads what it held before


def test_twins_with_one_name_hand_the_same_entries_to_both(redis_client: redis.Redis, key_prefix: str) -> None:
    first, second = twins(redis_client, f"{key_prefix}s", held=3)
    assert len(first) == 3 and second == first


def test_restarts_pile_up_until_delconsumer_and_delconsumer_drops_pending(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    stream = f"{key_prefix}s"
    assert len(restarts_pile_up(redis_client, stream, restarts=4)) == 4
    redis_client.xadd(stream, {"order_id": "late"})
    redis_client.xreadgroup(GROUP, "host-9999", {stream: ">"})  # dies holding one entry
    assert poll(lambda: all(int(c["idle"]) >= 50 for c in redis_client.xinfo_consumers(stream, GROUP)), 5)
    reaped = reap_idle_consumers(redis_client, stream, min_idle_ms=50)
    assert sorted(reaped) == [f"host-{pid}" for pid in range(1000, 1004)]
    assert consumers(redis_client, stream) == {"host-9999": 1}  # the one holding work is kept
    assert delconsumer(redis_client, stream, "host-9999") == 1
    assert redis_client.xpending(stream, GROUP)["pending"] == 0  # the entry left the PEL: nobody redoes it
