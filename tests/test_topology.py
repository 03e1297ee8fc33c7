"""The launcher's topologies as real processes: up, status, down, reuse, failover, errors."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from billing_support import wait_until

from labs.launcher import sentinel, topologies
from labs.launcher.errors import LauncherError
from labs.launcher.process import command, pid_alive
from labs.launcher.sentinel import pairs
from labs.launcher.topology import Topology

pytestmark = pytest.mark.timeout(90)


def _pids(topo: Topology) -> list[int]:
    return [pid for proc in topo.processes if (pid := proc.pid()) is not None]


def test_up_status_down_leaves_no_process(tmp_path: Path) -> None:
    topo = topologies.on_free_ports("single", tmp_path)
    addrs = topo.ensure()
    pids = _pids(topo)
    assert len(pids) == 1 and addrs.url.endswith(f":{topo.servers[0].port}/0")
    (node,) = topo.status().nodes
    assert node.role == "master" and node.pid == pids[0]
    assert topo.stop() == pids
    assert not any(pid_alive(pid) for pid in pids)
    assert not topo.status().running


def test_up_twice_reuses_the_running_processes(tmp_path: Path) -> None:
    topo = topologies.on_free_ports("aof", tmp_path)
    try:
        topo.ensure()
        first = _pids(topo)
        topo.ensure()
        assert _pids(topo) == first
    finally:
        topo.stop()


def test_stale_pid_file_is_cleaned_up(tmp_path: Path) -> None:
    topo = topologies.on_free_ports("single", tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    server = topo.servers[0]
    server.home.mkdir(parents=True)
    server.pidfile.write_text(gone.stdout)
    try:
        topo.ensure()
        assert server.pid() not in (None, int(gone.stdout))
    finally:
        topo.stop()


def test_foreign_process_on_the_port_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        topo = topologies.create("single", tmp_path, server_ports=[port], port_vars={port: "LAB_SINGLE_PORT"})
        with pytest.raises(LauncherError) as err:
            topo.ensure()
    message = str(err.value)
    assert f"port {port} is in use" in message and "LAB_SINGLE_PORT" in message
    assert "\n" not in message


def test_process_that_dies_at_start_shows_its_log(tmp_path: Path) -> None:
    topo = topologies.on_free_ports("single", tmp_path)
    bad = topologies.create(
        "single", tmp_path, server_ports=[topo.servers[0].port], extra_config=("maxmemory-policy bogus",)
    )
    with pytest.raises(LauncherError) as err:
        bad.ensure()
    assert "exited with code" in str(err.value) and "maxmemory-policy" in str(err.value)
    assert not _pids(bad)


@pytest.mark.failover
@pytest.mark.parametrize("hard", [False, True], ids=["graceful", "kill-9"])
def test_failover_promotes_the_replica(sentinel_topology: Topology, hard: bool) -> None:
    old = sentinel_topology.master_addr()
    replica = next(p.port for p in sentinel_topology.servers if p.port != old[1])
    result = sentinel_topology.failover(hard=hard, restart_old=False)
    assert result.old_master == old
    assert result.new_master == ("127.0.0.1", replica)
    views = sentinel_topology.sentinel_views()
    assert sum(view == result.new_master for view in views) >= 2
    roles = {n.port: n.role for n in sentinel_topology.status().nodes}
    assert roles[replica] == "master"
    if hard:
        assert roles[old[1]] == "down"
    assert sentinel_topology.wait_switched(old, time.monotonic() + 30) == result.new_master
    with pytest.raises(LauncherError) as waited:  # a wait that cannot end names what each sentinel reports
        sentinel_topology.wait_switched(result.new_master, time.monotonic() + 0.3)
    message = str(waited.value)
    assert message.count("tilt=") == len(sentinel_topology.sentinels), message
    assert f"{result.new_master[0]}:{result.new_master[1]} flags=master" in message, message


@pytest.mark.failover
def test_hard_failover_brings_the_old_master_back_as_replica(
    topology_factory: Callable[..., Topology],
) -> None:
    topo = topology_factory("sentinel")
    result = topo.failover(hard=True, restart_old=True)
    roles = {n.port: n.role for n in topo.status().nodes}
    assert roles[result.new_master[1]] == "master"
    assert roles[result.old_master[1]] == "slave"


@pytest.mark.failover
def test_a_graceful_failover_right_after_the_replica_was_cut_off_still_happens(sentinel_topology: Topology) -> None:
    # Frozen longer than down-after and cut from its master, the replica is s_down for the
    # sentinels and their INFO of it (refreshed every 10 s) is stale after it resumes: SENTINEL
    # FAILOVER then answers NOGOODSLAVE, or starts and aborts (-failover-abort-no-good-slave),
    # and Sentinel does not try again by itself. ask_failover asks until a master is switched.
    old = sentinel_topology.master_addr()
    replica = next(p for p in sentinel_topology.servers if p.port != old[1])
    pid = replica.pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        with contextlib.closing(sentinel_topology.server(old[1]).client()) as master:
            master.client_kill_filter(_type="replica")
        wait_until(lambda: "s_down" in _replica_flags(sentinel_topology), 10, "a sentinel to flag the replica s_down")
        with (
            contextlib.closing(sentinel_topology.sentinels[0].client()) as first,
            pytest.raises(redis.ResponseError, match="NOGOODSLAVE"),  # the state the retries are for
        ):
            command(first, "SENTINEL", "FAILOVER", "mymaster")
    finally:
        os.kill(pid, signal.SIGCONT)
    result = sentinel_topology.failover(hard=False, restart_old=False, timeout_s=40)
    assert result.old_master == old and result.new_master == ("127.0.0.1", replica.port)


def _replica_flags(topo: Topology) -> str:
    with contextlib.closing(topo.sentinels[0].client()) as client:
        replicas = command(client, "SENTINEL", "REPLICAS", "mymaster")
    return " ".join(str(pairs(r).get("flags", "")) for r in replicas)


def test_a_sentinels_stale_view_of_a_replica_is_named() -> None:
    # what SENTINEL REPLICAS shows for a replica that rejoined moments ago, before this sentinel's next INFO of it
    fresh = {"name": "127.0.0.1:7002", "flags": "slave", "role-reported": "slave", "master-link-status": "ok",
             "master-host": "127.0.0.1", "master-port": "7001"}
    master = ("127.0.0.1", 7001)
    assert sentinel.replica_view_problem(fresh, master) == ""
    assert "role master" in sentinel.replica_view_problem({**fresh, "role-reported": "master"}, master)
    assert "link is err" in sentinel.replica_view_problem({**fresh, "master-link-status": "err"}, master)
    assert "s_down" in sentinel.replica_view_problem({**fresh, "flags": "s_down,slave"}, master)
    assert "127.0.0.1:7009" in sentinel.replica_view_problem({**fresh, "master-port": "7009"}, master)


def test_sentinel_needs_a_replica_and_three_sentinels(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="three sentinels"):
        topologies.create("sentinel", tmp_path, server_ports=[7001, 7002], sentinel_ports=[7003])


def test_unknown_topology_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="unknown topology"):
        topologies.create("galaxy", tmp_path, server_ports=[7001])


def test_one_topology_factory() -> None:
    """A topology is built by labs.launcher.topologies (create, from_env, on_free_ports), which knows
    every kind, the cluster too; Topology's own constructors are its builders, not a second factory."""
    root = Path(__file__).resolve().parents[1]
    old = re.compile(r"\bTopology\.(create|from_env|on_free_ports)\(")
    paths = [*root.glob("labs/**/*.py"), *root.glob("tests/*.py"), *root.glob("notebooks/*.ipynb")]
    callers = {str(p.relative_to(root)) for p in paths if p.exists() and old.search(p.read_text())}
    callers -= {"labs/launcher/topologies.py", "tests/test_topology.py"}
    assert sorted(callers) == [], "build it with labs.launcher.topologies"

