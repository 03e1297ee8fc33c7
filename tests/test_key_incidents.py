"""labs.experiments.key_incidents: a big key, a hot key (LFU only), and eviction of a stream as monitoring sees it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import redis
from monitoring_support import MonitoredStack

from labs.experiments import eviction, key_incidents

pytestmark = pytest.mark.timeout(120)


def test_bigkeys_finds_the_big_hash_and_memory_usage_sizes_it(tmp_path: Path) -> None:
    with eviction.throwaway_redis(tmp_path, policy="noeviction", headroom_bytes=256 << 20) as proc, \
            contextlib.closing(proc.client(5.0)) as client:
        for i in range(50):
            client.set(f"small:{i}", "x" * 10)
        key_incidents.make_big_hash(client, "big:hash", fields=20_000)
        found, output = key_incidents.big_key_report(client, proc.port)
    by_type = {b.type: b for b in found}
    assert by_type["hash"].key == "big:hash" and by_type["hash"].size == 20_000 and by_type["hash"].unit == "fields"
    assert by_type["string"].size == 10
    assert by_type["hash"].memory_bytes > 500_000 > 100 * by_type["string"].memory_bytes
    assert "Scanning the entire keyspace" in output


def test_memkeys_ranks_each_type_by_memory_usage(tmp_path: Path) -> None:
    with eviction.throwaway_redis(tmp_path, policy="noeviction", headroom_bytes=256 << 20) as proc, \
            contextlib.closing(proc.client(5.0)) as client:
        client.set("blob", "x" * 100_000)
        client.rpush("many", *(["1"] * 5_000))
        client.rpush("few", "y" * 200_000)
        by_type, output = key_incidents.mem_key_report(proc.port)
        usage = client.memory_usage("few", samples=0)
    assert by_type["string"][0] == "blob" and by_type["string"][1] > 100_000
    assert by_type["list"] == ("few", usage)  # one big item outweighs 5,000 small ones
    assert "Scanning the entire keyspace" in output


def test_hotkeys_needs_an_lfu_policy_and_then_finds_the_hot_key(tmp_path: Path) -> None:
    with eviction.throwaway_redis(tmp_path, policy="noeviction", headroom_bytes=256 << 20) as proc, \
            contextlib.closing(proc.client(5.0)) as client:
        key_incidents.make_big_hash(client, "big:hash", fields=5_000)  # big, but written by 3 commands
        for _ in range(2_000):
            client.get("big:hash:read")  # a key used often before the switch
        client.set("big:hash:read", "v")
        for _ in range(2_000):
            client.get("big:hash:read")
        hot = key_incidents.hot_key_report(client, proc.port, "hot", reads=20_000,
                                           written_before=("big:hash", "big:hash:read"))
        policy_after = client.config_get("maxmemory-policy")["maxmemory-policy"]
    assert "LFU" in hot.refused and hot.policy_before == "noeviction"
    assert hot.found[0][0] == "hot" and hot.found[0][1] == hot.freq
    assert hot.freq > dict(hot.found).get("big:hash", 0)
    assert policy_after == "noeviction"  # put back
    # The counters start at the switch: keys from before it read 0, however much they were used ...
    assert hot.freq_before_switch == {"big:hash": 0, "big:hash:read": 0}
    # ... and a key created after it starts at 5 (LFU_INIT_VAL), read in the same MULTI.
    assert hot.freq_written_under_lfu == 5


def test_eviction_takes_the_stream_and_monitoring_sees_it(monitored_stack: MonitoredStack) -> None:
    node = monitored_stack.node(monitored_stack.aof)
    with contextlib.closing(redis.Redis.from_url(monitored_stack.aof.url)) as client:
        seen = key_incidents.evict_stream(client, monitored_stack.mon.api, node, "incidents-test:")
        assert client.config_get("maxmemory")["maxmemory"] == "0"
        assert not list(client.scan_iter(match="incidents-test:cache:*"))
    assert seen.length_before == 20 and not seen.stream_exists_after
    assert "NOGROUP" in seen.consumer_error
    assert seen.length_after is None  # the stream's series is gone from Prometheus
    assert seen.evicted_keys >= 1
    assert seen.fired.alert == "RedisEvictingKeys" and seen.fired.labels["severity"] == "critical"
