"""Bad cluster input to both CLIs is one line and exit code 2, never a traceback.

The stream-name rule is ``solutions.cli.cluster_stream_problem``, the shard-count range
``solutions.settings.MAX_SHARDS``; a start-up node that is not a cluster node is
``solutions.slot_map.NotAClusterError``, a registry key holding junk
``solutions.shards.ShardRegistryError``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid

import pytest
from billing_support import ROOT
from redis.cluster import RedisCluster

from labs.launcher.cluster import ClusterTopology
from solutions import billing, producer
from solutions.cli import cluster_stream_problem
from solutions.settings import MAX_SHARDS

pytestmark = pytest.mark.timeout(60)

CLIS = {"worker": "solutions.billing", "producer": "solutions.producer"}


def run(cli: str, *args: str) -> subprocess.CompletedProcess[str]:
    extra = ["--ledger", "/tmp/unused-ledger.sqlite3"] if cli == "worker" else ["--count", "1"]
    return subprocess.run([sys.executable, "-m", CLIS[cli], *args, *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=40)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in done.stderr.strip().splitlines() if ln]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_the_stream_name_rule() -> None:
    assert cluster_stream_problem("orders") is None
    for name in ("acc-{same}-orders", "orders}", "{orders"):
        problem = cluster_stream_problem(name)
        assert problem is not None and "one slot" in problem


@pytest.mark.parametrize("cli", sorted(CLIS))
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shards", "3", "--stream", "acc-{same}-orders"], "must not contain '{' or '}'"),
        (["--shards", "0"], "1 to 16384"),
        (["--shards", str(MAX_SHARDS + 1)], "1 to 16384"),
    ],
    ids=["braces", "zero-shards", "too-many-shards"],
)
def test_bad_flags_under_cluster_are_one_line_and_exit_2(
    cli: str, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused while parsing, before any connection (in-process: the same main() the console scripts run)."""
    main = billing.main if cli == "worker" else producer.main
    with pytest.raises(SystemExit) as exited:
        main(["--cluster", "127.0.0.1:1", *args])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error: " in lines[0] and says in lines[0], err


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_a_cluster_node_that_is_not_a_cluster_is_one_line_and_exit_2(cli: str, redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    done = run(cli, "--cluster", f"127.0.0.1:{port}", "--shards", "3", "--stream", f"ci-{uuid.uuid4().hex[:6]}")
    line = one_line(done)
    assert done.returncode == 2 and "is not a cluster node" in line and "cluster support disabled" in line, line


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_a_registry_key_holding_junk_is_one_line_and_exit_2(cli: str, cluster: ClusterTopology) -> None:
    stream = f"junk-{uuid.uuid4().hex[:6]}"
    port = cluster.addresses().ports[0]
    with contextlib.closing(RedisCluster(host="127.0.0.1", port=port, decode_responses=True)) as rc:
        rc.set(f"{stream}:shards", "not json")
        try:
            done = run(cli, "--cluster", f"127.0.0.1:{port}", "--stream", stream)
        finally:
            rc.delete(f"{stream}:shards")
    line = one_line(done)
    assert done.returncode == 2 and f"{stream}:shards does not hold a shard set" in line, line
