"""labs.experiments.operator_info: INFO as an operator reads it, and a stall in SLOWLOG and LATENCY."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import redis

from labs.experiments import eviction, operator_info

pytestmark = pytest.mark.timeout(60)


def test_operator_view_reads_every_field_from_one_info(redis_client: redis.Redis) -> None:
    rows = operator_info.operator_view(redis_client)
    assert [r.field for r in rows] == [f for _, f, _, _ in operator_info.FIELDS]
    values = {r.field: r.value for r in rows}
    assert values["role"] == "master"
    assert values["used_memory"] > 0 and values["used_memory_peak"] >= values["used_memory"] * 0.5
    assert all(r.metric.startswith("redis_") for r in rows)
    assert {r.section for r in rows} == {"memory", "clients", "stats", "replication", "persistence"}


def test_a_lua_stall_lands_in_slowlog_and_latency(tmp_path: Path) -> None:
    with eviction.throwaway_redis(tmp_path, policy="noeviction", headroom_bytes=64 << 20) as proc, \
            contextlib.closing(proc.client(5.0)) as client:
        stall = operator_info.stall(client, 150)
    assert stall.stall_ms >= 150
    event, _, latest_ms, max_ms = stall.latency_latest[0]
    assert event == "command" and latest_ms >= 150 and max_ms >= latest_ms
    assert any(entry["duration"] >= 150_000 for entry in stall.slowlog)  # microseconds
