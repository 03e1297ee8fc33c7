"""labs.launcher.redis_copies: three copies under Sentinel, min-replicas-to-write, appendfsync always."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from labs import polling
from labs.launcher import broker_registry, redis_copies
from labs.launcher.errors import LauncherError
from labs.launcher.process import pid_alive

pytestmark = pytest.mark.timeout(120)


def test_three_copies_with_fsync_always_and_min_replicas(tmp_path: Path) -> None:
    copies = redis_copies.Copies(fsync="always")
    topo = redis_copies.three_copies(tmp_path, copies)
    try:
        addrs = topo.ensure()
        host, port = topo.master_addr()
        master = redis.Redis(host=host, port=port, decode_responses=True)
        info = master.info("replication")
        assert info["role"] == "master" and info["connected_slaves"] == 2, info
        assert master.config_get("appendfsync")["appendfsync"] == "always"
        assert master.config_get("min-replicas-to-write")["min-replicas-to-write"] == "1"
        master.xadd("orders", {"n": "1"})
        assert master.wait(2, 5000) == 2  # both replicas have it
        assert len(addrs.sentinels) == 3
        assert "3 copies" in copies.durability(1) and "WAIT 1" in copies.durability(1)
        master.close()
    finally:
        topo.stop()


def test_a_master_without_current_replicas_refuses_writes(tmp_path: Path) -> None:
    """min-replicas-to-write 1: with both replicas gone for min-replicas-max-lag, XADD says NOREPLICAS."""
    topo = redis_copies.three_copies(tmp_path, redis_copies.Copies(min_replicas_max_lag_s=1))
    try:
        topo.ensure()
        for proc in topo.sentinels:  # no failover: this is about the master alone
            proc.kill()
        host, port = topo.master_addr()
        for proc in topo.servers:
            if proc.port != port:
                proc.kill()
        master = redis.Redis(host=host, port=port)

        def refused() -> bool:
            try:
                master.xadd("orders", {"n": "1"})
            except redis.ResponseError as exc:
                return "NOREPLICAS" in str(exc)
            return False

        polling.wait_until(refused, 15, "NOREPLICAS after min-replicas-max-lag (1 s) plus a replica ping period")
        master.close()
    finally:
        topo.stop()


def test_settings_are_checked() -> None:
    with pytest.raises(LauncherError, match="appendfsync"):
        redis_copies.Copies(fsync="no")  # type: ignore[arg-type]  # the point: a value outside the Literal
    with pytest.raises(LauncherError, match="min-replicas-to-write"):
        redis_copies.Copies(min_replicas_to_write=3)


OWNER = """
import sys
from pathlib import Path
from labs.launcher import redis_copies
topo = redis_copies.three_copies(Path(sys.argv[1]))
topo.ensure()
redis_copies.own(topo)
print(" ".join(str(p.pid()) for p in topo.processes), flush=True)
sys.stdin.readline()
"""


def test_the_owners_exit_stops_the_three_copies(tmp_path: Path) -> None:
    env = {"LAB_RUN_DIR": str(tmp_path / "run")}
    child = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "elsewhere")], env={**os.environ, **env},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[1])
    assert child.stdout is not None
    pids = [int(p) for p in child.stdout.readline().split()]
    assert len(pids) == 6 and all(pid_alive(p) for p in pids), pids
    child.kill()
    child.wait(10)
    polling.wait_until(lambda: not any(pid_alive(p) for p in pids), 30, "the reaper stopping 3 servers, 3 sentinels")
    polling.wait_until(lambda: broker_registry.entries(tmp_path / "run") == [], 10, "the reaper removing its records")
