"""labs.launcher.prom_config: prometheus.yml as the add-on writes it, and the exporter's collect script on Redis."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import redis

from labs.experiments import eviction
from labs.launcher import flavours
from labs.launcher.prom_config import LUA_SOURCE, ExporterTarget, collect_script, prometheus_config


def _config(tmp_path: Path) -> dict[str, Any]:  # Prometheus's config: JSON of any shape
    text = prometheus_config(
        prometheus_port=9390,
        exporters=[ExporterTarget(9393, "sentinel", 6392, False), ExporterTarget(9395, "sentinel", 26390, True)],
        rules_dir=tmp_path / "rules",
        workers_dir=tmp_path / "workers",
    )
    return dict(json.loads(text))


def test_every_two_seconds_and_the_lab_rules(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config["global"]["scrape_interval"] == config["global"]["evaluation_interval"] == "2s"
    # a scrape must not outlast its interval (Prometheus refuses the config otherwise)
    assert config["global"]["scrape_timeout"] == "2s"
    assert config["rule_files"] == [str(tmp_path / "rules" / "*.yml")]


def test_targets_are_labelled_with_topology_and_node(tmp_path: Path) -> None:
    jobs = {job["job_name"]: job for job in _config(tmp_path)["scrape_configs"]}
    assert set(jobs) == {"redis", "redis-sentinel", "billing-worker", "prometheus"}
    assert jobs["redis"]["static_configs"] == [
        {"targets": ["127.0.0.1:9393"], "labels": {"topology": "sentinel", "node": "127.0.0.1:6392"}}
    ]
    assert jobs["redis-sentinel"]["static_configs"][0]["labels"]["node"] == "127.0.0.1:26390"
    workers = jobs["billing-worker"]
    assert workers["honor_labels"] is True
    assert workers["file_sd_configs"][0]["files"] == [str(tmp_path / "workers" / "*.json")]


def test_the_collect_script_gets_the_patterns() -> None:
    script = collect_script(("nb10:*orders", 'we"ird'))
    assert 'local PATTERNS = {"nb10:*orders", "we\\"ird"}' in script
    assert script.count("local PATTERNS") == 1
    assert LUA_SOURCE.read_text().count("local PATTERNS = {") == 1


def test_the_collect_script_reports_lag_and_pending_as_redis_says(redis_url: str, key_prefix: str) -> None:
    """The script the exporter EVALs: lag from XINFO GROUPS, the oldest pending id, the largest idle."""
    stream = f"{key_prefix}orders"
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        client.xgroup_create(stream, "billing", id="$", mkstream=True)
        ids = [client.xadd(stream, {"n": str(i)}) for i in range(5)]
        client.xreadgroup("billing", "c1", {stream: ">"}, count=2)
        client.xgroup_create(stream, "idle", id="$")
        reply = client.eval(collect_script((f"{key_prefix}*",)), 0)
    values = dict(zip(reply[::2], reply[1::2], strict=True))
    assert values[f"group_lag_entries;{stream};billing"] == "3"
    assert values[f"group_lag_entries;{stream};idle"] == "0"
    assert values[f"oldest_pending_id_ms;{stream};billing"] == ids[0].split("-")[0]
    assert int(values[f"pending_max_idle_ms;{stream};billing"]) >= 0
    assert f"oldest_pending_id_ms;{stream};idle" not in values  # nothing pending there
    assert values[f"group_caught_up;{stream};billing"] == "0"
    assert values[f"group_caught_up;{stream};idle"] == "1"


def test_the_collect_script_says_caught_up_after_a_trim_past_the_cursor(redis_url: str, key_prefix: str) -> None:
    """Trimmed past the group's cursor, ``caught_up`` says when the group read all that is left; the lag follows the
    server (Redis 7.0 and Valkey 8.0 keep counting the trimmed entries, Redis 8.2 does not)."""
    stream = f"{key_prefix}orders"
    script = collect_script((f"{key_prefix}*",))
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        client.xgroup_create(stream, "billing", id="0", mkstream=True)
        for i in range(5):
            client.xadd(stream, {"n": str(i)})
        client.xreadgroup("billing", "c1", {stream: ">"}, count=1)
        client.xtrim(stream, maxlen=1, approximate=False)
        trimmed = client.eval(script, 0)
        client.xreadgroup("billing", "c1", {stream: ">"})
        read_all = client.eval(script, 0)
        moves = flavours.trim_moves_group_lag(client.info("server"))
    before = dict(zip(trimmed[::2], trimmed[1::2], strict=True))
    after = dict(zip(read_all[::2], read_all[1::2], strict=True))
    lag_before, lag_after = before[f"group_lag_entries;{stream};billing"], after[f"group_lag_entries;{stream};billing"]
    assert before[f"group_caught_up;{stream};billing"] == "0" and after[f"group_caught_up;{stream};billing"] == "1"
    if moves:  # Redis 8.2: the trim moved the group's count too
        assert (lag_before, lag_after) == ("1", "0")
    else:  # Redis 7.0, Valkey 8.0: the trimmed entries stay counted, after the group read all that is left too
        assert lag_before == "4" and int(lag_after) > 0


def test_the_collect_script_is_read_only_so_a_write_pause_does_not_stall_the_scrape(tmp_path: Path) -> None:
    """FAILOVER and CLUSTER FAILOVER pause writes (CLIENT PAUSE WRITE); a plain EVAL would wait the pause out."""
    with eviction.throwaway_redis(tmp_path, policy="noeviction", headroom_bytes=64 << 20) as proc, \
            contextlib.closing(proc.client(5.0)) as client:
        client.execute_command("CLIENT", "PAUSE", "1500", "WRITE")
        started = time.monotonic()
        assert client.eval(collect_script(("*orders",)), 0) == []
        read_only_s = time.monotonic() - started
        started = time.monotonic()
        client.eval("return 1", 0)  # the same EVAL without the no-writes flag
        plain_s = time.monotonic() - started
    assert read_only_s < 0.5 < plain_s
