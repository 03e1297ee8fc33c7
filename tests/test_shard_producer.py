"""billing-producer --cluster (one Producer over the shards) on a real cluster: every event in the shard its order_id
routes to, one log line per attempt, the shard set registered once; another shard count or --shards without
--cluster is one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from billing_support import ROOT
from redis.cluster import RedisCluster

from labs.launcher.cluster import ClusterTopology
from solutions.shards import registry_key, shard_of

pytestmark = pytest.mark.timeout(90)


def produce(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "solutions.producer", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, **(env or {})}, check=False)


def test_each_event_goes_to_the_shard_of_its_order(cluster: ClusterTopology, tmp_path: Path) -> None:
    node = f"127.0.0.1:{cluster.addresses().ports[0]}"
    log = tmp_path / "sent.jsonl"
    done = produce("--stream", "sp:orders", "--shards", "3", "--count", "150", "--rate", "0", "--orders", "20",
                   "--log", str(log), env={"BILLING_CLUSTER": node})
    assert done.returncode == 0, done.stderr
    assert "attempted=150 confirmed=150 unknown=0 refused=0" in done.stderr
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(sent) == 150 and {s["status"] for s in sent} == {"confirmed"}
    rc = RedisCluster(host="127.0.0.1", port=cluster.addresses().ports[0], decode_responses=True)
    try:
        names = json.loads(rc.get(registry_key("sp:orders")))["tags"]
        shards = [f"sp:orders:{{{tag}}}" for tag in names]
        where: dict[str, set[int]] = defaultdict(set)
        events = []
        for index, name in enumerate(shards):
            for _, fields in rc.xrange(name):
                where[fields["order_id"]].add(index)
                events.append(fields["event_id"])
        masters = {rc.get_node_from_key(name).name for name in shards}
    finally:
        rc.close()
    assert sorted(events) == sorted(s["event_id"] for s in sent)
    assert all(indexes == {shard_of(order, 3)} for order, indexes in where.items())  # one shard per order
    assert len(masters) == 3, "the registered tags put one shard on each master"


def test_another_shard_count_or_shards_alone_is_one_clear_line(cluster: ClusterTopology, tmp_path: Path) -> None:
    node = f"127.0.0.1:{cluster.addresses().ports[0]}"
    assert produce("--cluster", node, "--stream", "sp:fixed", "--shards", "2", "--count", "1").returncode == 0
    wrong = produce("--cluster", node, "--stream", "sp:fixed", "--shards", "3", "--count", "1")
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    (line,) = [ln for ln in wrong.stderr.splitlines() if " ERROR " in ln]
    assert "has 2 shards (fixed for its life" in line
    lone = produce("--shards", "3", "--count", "1")
    assert lone.returncode == 2
    assert " ".join(lone.stderr.split()) == (
        "billing-producer: error: invalid settings: shards needs cluster (a stream is sharded on a cluster) "
        "(see billing-producer --help)"
    )
