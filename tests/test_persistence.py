"""labs.experiments.persistence: what a kill -9 leaves of acknowledged writes, with and without AOF."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from labs.experiments.persistence import (
    SurvivalResult,
    count_present,
    kill_and_count,
    stop_and_count,
    write_acknowledged,
)
from labs.launcher.topology import Topology

pytestmark = [pytest.mark.failover, pytest.mark.timeout(60)]

N_WRITES = 500


def test_aof_everysec_keeps_every_acknowledged_write_after_its_fsync_second(
    topology_factory: Callable[..., Topology],
) -> None:
    topo = topology_factory("aof")
    result = kill_and_count(topo, stream="orders", n_writes=N_WRITES, fsync_wait_s=1.5)
    assert result == SurvivalResult("aof", N_WRITES, N_WRITES, 0, result.elapsed_s)
    assert topo.servers[0].ping(), "the server is running again after the experiment"


def test_no_persistence_loses_every_acknowledged_write(topology_factory: Callable[..., Topology]) -> None:
    topo = topology_factory("single")
    result = kill_and_count(topo, stream="orders", n_writes=N_WRITES, fsync_wait_s=0.2)
    assert result == SurvivalResult("single", N_WRITES, 0, N_WRITES, result.elapsed_s)


def test_kill_without_waiting_for_fsync_loses_nothing_with_aof(
    topology_factory: Callable[..., Topology],
) -> None:
    # everysec may lose up to a second on a machine or OS crash. A killed *process* loses
    # nothing: Redis write(2)s the AOF buffer before it replies, so every acknowledged write
    # is in the kernel's page cache when kill -9 lands, even with no wait for the fsync.
    result = kill_and_count(topology_factory("aof"), stream="orders", n_writes=N_WRITES, fsync_wait_s=0)
    assert result.acknowledged == N_WRITES
    assert result.survived == N_WRITES and result.lost == 0


def test_count_present_counts_only_the_producers_own_ids(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    redis_client.xadd(stream, {"other": "before"})
    ids = write_acknowledged(redis_client, stream, 450)
    redis_client.xadd(stream, {"other": "after"})
    redis_client.xdel(stream, ids[0], ids[-1])
    assert len(ids) == 450
    assert count_present(redis_client, stream, ids) == 448
    assert count_present(redis_client, stream, []) == 0


def test_an_error_reply_is_not_an_acknowledgement(redis_client: redis.Redis, key_prefix: str) -> None:
    key = f"{key_prefix}not-a-stream"
    redis_client.set(key, "x")
    assert write_acknowledged(redis_client, key, 5) == []


def test_kill_and_count_needs_at_least_one_write(topology_factory: Callable[..., Topology]) -> None:
    with pytest.raises(ValueError, match="n_writes"):
        kill_and_count(topology_factory("single"), stream="orders", n_writes=0)


def test_a_graceful_stop_with_default_save_rules_writes_an_rdb_and_keeps_the_data(tmp_path: Path) -> None:
    # The trap in "stop Redis and see what survived": SIGTERM/SHUTDOWN saves an RDB first.
    result = stop_and_count(tmp_path, default_save=True, n_writes=100)
    assert result.save != "" and result.rdb_bytes > 0
    assert (result.acknowledged, result.survived) == (100, 100)


def test_a_graceful_stop_with_no_save_points_keeps_nothing(tmp_path: Path) -> None:
    result = stop_and_count(tmp_path, default_save=False, n_writes=100)
    assert (result.save, result.rdb_bytes) == ("", 0)
    assert (result.acknowledged, result.survived) == (100, 0)
