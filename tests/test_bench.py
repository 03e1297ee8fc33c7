"""``make bench`` in its tiny mode, so that the bench never rots. No timing is asserted."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_tiny_bench_runs_and_reports_sane_numbers(tmp_path: Path, redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "labs.bench", "--tiny", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "placement:" in result.stdout and "loopback PING round trip" in result.stdout
    (report,) = tmp_path.glob("bench-*.json")
    data = json.loads(report.read_text())
    rows = {row["name"]: row for row in data["rows"]}
    sections = {row["section"] for row in data["rows"]}
    expected = {"process", "in process (diagnosis)", "in process CPU (diagnosis)", "concurrency", "produce",
                "XADD latency", "failover", "cluster shards",
                "cluster failover"}
    assert expected <= sections
    for row in data["rows"]:
        assert row["values"], row["name"]
        assert all(math.isfinite(v) and v > 0 for v in row["values"]), row
    ceiling = rows["ceiling: raw redis.asyncio, COUNT 100, one XACK per batch"]
    assert ceiling["ratio_q1"] is None  # no paired ratios, no quartiles
    assert "ratio q1 … q3" in result.stdout
    targets = {"none": 0.8, "redis": 0.3, "sqlite": 0.6}  # issue 20's, and issue 8's floor for redis
    default_gc = ", CPython's default GC"
    runs = [(d, "", 3) for d in targets] + [(d, default_gc, 2) for d in ("none", "sqlite")]  # (dedupe, GC, per round)
    for dedupe, gc_words, per_round in runs:
        name = f"reference worker, --dedupe {dedupe}{gc_words}"
        row, ceiling = rows[name], rows[f"ceiling: raw redis.asyncio, COUNT 100, one XACK per batch{gc_words}"]
        assert len(row["ratios"]) == len(row["values"]) and len(ceiling["values"]) == per_round * len(row["values"])
        assert row["ratio"] == pytest.approx(statistics.median(row["ratios"]))
        assert row["ratio_q1"] <= row["ratio"] <= row["ratio_q3"]  # the spread of the paired ratios
        assert min(row["ratios"]) <= row["ratio_q1"] and row["ratio_q3"] <= max(row["ratios"])
        assert isinstance(row["met"], bool) and row["target"] == f"≥ {targets[dedupe]}× ceiling"
        cpu = rows[f"{name}, CPU per message"]  # the same runs in CPU microseconds per message
        assert cpu["unit"] == "µs" and len(cpu["ratios"]) == len(row["ratios"]) and cpu["met"] is None
        assert f"diagnosis: {name}: " in result.stdout  # the verdict line under the table
    _check_process_rows(data["rows"], result.stdout)
    assert data["meta"]["placement"]["ping_rtt_us"] > 0
    shards = [row for row in data["rows"] if row["section"] == "cluster shards"]
    assert [row["name"].split(",")[1].strip() for row in shards] == ["1 shard(s)", "2 shard(s)"] * 2
    assert all(row["ratio_of"] == "ideal: N × 1 shard" and row["ratio"] > 0 for row in shards)
    kill = rows["worker: kill -9 of a shard's master → first charge on that shard"]
    writer = rows["raw redis-py RedisCluster writer → first XADD to that slot"]
    assert kill["values"][0] > 0.5 and writer["values"][0] > 0.5  # both waited for the promotion


def _check_process_rows(rows: list[dict[str, object]], stdout: str) -> None:
    """The user's figure: per shape the raw process, then billing-worker processes paired with it,
    with targets on the throughput flags and the course defaults' price on the producer's shape."""
    from labs.bench.runner import TINY

    process = {str(row["name"]): row for row in rows if row["section"] == "process"}
    raw = "raw redis.asyncio process, COUNT 100, one XACK per batch"
    for shape in TINY.process_shapes:
        assert f"{raw} · {shape}" in process
        for dedupe, target in (("none", 0.9), ("sqlite", 0.7)):
            row = process[f"billing-worker process, --dedupe {dedupe}, --count 100 --parallelism 100, "
                          f"--handler-delay-ms 0 · {shape}"]
            assert row["target"] == f"≥ {target}× raw" and isinstance(row["met"], bool)
            q1, ratio, q3 = row["ratio_q1"], row["ratio"], row["ratio_q3"]
            assert isinstance(q1, float) and isinstance(ratio, float) and isinstance(q3, float), row
            assert q1 <= ratio <= q3, row
            assert f"{row['name']}: " in stdout
    defaults = [name for name in process if "defaults (--count 16 --parallelism 8)" in name]
    assert len(defaults) == 2 and all(name.endswith("· four fields") for name in defaults)
    assert stdout.count("price of the defaults: ") == 2 and "add --count 100 --parallelism 100" in stdout
