"""The ``cluster`` topology as real processes: formed, ready, reused, failed over both ways, stopped clean."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from port_support import cluster_ports

from labs.launcher import binaries, ports, topologies
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import SLOTS, cluster_info, masters, readiness_problem, replicas_of
from labs.launcher.errors import LauncherError
from labs.launcher.process import pid_alive
from labs.launcher.topology import Topology

pytestmark = pytest.mark.timeout(90)


def _pids(topo: Topology) -> list[int]:
    return [pid for proc in topo.processes if (pid := proc.pid()) is not None]


def test_formed_cluster_serves_every_slot_with_three_linked_pairs(cluster: ClusterTopology) -> None:
    for proc in cluster.servers:
        info = cluster_info(proc)
        assert info is not None and info["cluster_state"] == "ok"
        assert int(info["cluster_slots_ok"]) == SLOTS and int(info["cluster_known_nodes"]) == 6
        assert "cluster-node-timeout 1000" in proc.conf.read_text()
        assert "cluster-require-full-coverage no" in proc.conf.read_text()
        with proc.client() as client:
            assert client.config_get("appendonly") == {"appendonly": "yes"}
    view = cluster.nodes()
    serving = masters(view)
    assert len(serving) == 3
    assert sum(hi - lo + 1 for m in serving for lo, hi in m.slots) == SLOTS
    assert all(len(replicas_of(view, m)) == 1 for m in serving)


def test_status_shows_each_masters_slots_replica_and_offsets(cluster: ClusterTopology) -> None:
    rows = cluster.status().nodes
    by_role = {role: [r for r in rows if r.role == role] for role in ("master", "replica")}
    assert len(by_role["master"]) == 3 and len(by_role["replica"]) == 3
    for row in by_role["master"]:
        assert row.detail.startswith("slots ") and "replica(s) " in row.detail and row.offset is not None
    for row in by_role["replica"]:
        assert "replica of " in row.detail and "link up" in row.detail


def test_ensure_twice_reuses_the_running_nodes(cluster: ClusterTopology) -> None:
    before = _pids(cluster)
    addrs = cluster.ensure()
    assert _pids(cluster) == before
    assert addrs.ports == tuple(p.port for p in cluster.servers)
    assert addrs.url.startswith("redis://127.0.0.1:")


@pytest.mark.failover
def test_graceful_failover_swaps_master_and_replica(healthy_cluster: ClusterTopology) -> None:
    old_master = masters(healthy_cluster.nodes())[0]
    result = healthy_cluster.failover()
    assert result.old_master[1] == old_master.port and result.slots == old_master.slots
    view = {n.port: n for n in healthy_cluster.nodes()}
    assert view[result.new_master[1]].is_master and view[result.new_master[1]].slots == old_master.slots
    assert not view[old_master.port].is_master, "CLUSTER FAILOVER turns the old master into the replica"
    assert result.ready_s is not None and result.ready_s >= result.elapsed_s


@pytest.mark.failover
def test_hard_failover_promotes_the_replica_and_the_old_master_rejoins(healthy_cluster: ClusterTopology) -> None:
    target = masters(healthy_cluster.nodes())[-1]
    result = healthy_cluster.failover(hard=True, master_port=target.port)
    assert result.hard and result.old_master[1] == target.port
    view = {n.port: n for n in healthy_cluster.nodes()}
    assert view[result.new_master[1]].slots == target.slots
    assert view[target.port].master_id == view[result.new_master[1]].node_id, "back as a replica of the new master"
    assert readiness_problem(healthy_cluster.servers) == ""


def test_busy_bus_port_names_the_variable(tmp_path: Path) -> None:
    picked = cluster_ports(6)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", picked[2] + ports.CLUSTER_BUS_OFFSET))
        squatter.listen()
        topo = topologies.create("cluster", tmp_path, server_ports=picked)
        try:
            with pytest.raises(LauncherError) as err:
                topo.ensure()
        finally:
            topo.stop()
    message = str(err.value)
    assert f"cluster bus port {picked[2] + 10000}" in message and ports.CLUSTER_PORTS_VAR in message
    assert "\n" not in message


def test_node_that_dies_at_start_shows_its_log(tmp_path: Path) -> None:
    topo = topologies.create("cluster", tmp_path, server_ports=cluster_ports(6),
                             extra_config=("cluster-node-timeout bogus",))
    try:
        with pytest.raises(LauncherError, match=r"exited with code .*cluster-node-timeout"):
            topo.ensure()
    finally:
        topo.stop()
    assert not _pids(topo)


def test_missing_redis_cli_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server = binaries.find("redis-server")  # the flavour's (valkey-server on valkey8)
    (bin_dir / Path(server).name).symlink_to(server)
    monkeypatch.setenv("REDIS_BIN_DIR", str(bin_dir))
    topo = topologies.create("cluster", tmp_path, server_ports=cluster_ports(6))
    try:
        with pytest.raises(LauncherError, match=r"-cli not found in .*: install"):
            topo.ensure()
    finally:
        topo.stop()


def test_ports_without_a_valid_bus_port_are_refused(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="below 55536"):
        topologies.create("cluster", tmp_path, server_ports=[60001, 60002, 60003, 60004, 60005, 60006])
    with pytest.raises(LauncherError, match="6 distinct ports"):
        topologies.create("cluster", tmp_path, server_ports=[7001, 7002])


@pytest.mark.failover
@pytest.mark.slow
def test_cli_up_status_failovers_and_down_leave_no_process(tmp_path: Path) -> None:
    env = dict(os.environ, LAB_RUN_DIR=str(tmp_path), COLUMNS="200")
    env[ports.CLUSTER_PORTS_VAR] = ",".join(map(str, cluster_ports(6)))

    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "labs", *args]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done

    try:
        assert "cluster: started" in lab("up", "cluster").stdout
        assert "cluster: reused" in lab("up", "cluster").stdout
        status = lab("status", "cluster").stdout
        assert status.count("slots ") == 3 and status.count("link up") == 3
        assert "every node says ok" in lab("failover", "cluster").stdout
        hard = lab("failover", "cluster", "--hard").stdout
        assert "every node says ok" in hard and "is a linked replica of" in hard
    finally:
        pids = [int(f.read_text()) for f in (tmp_path / "cluster").glob("*.pid")]
        down = subprocess.run([sys.executable, "-m", "labs", "down"], env=env, capture_output=True, text=True)
    assert "stopped 6 process(es)" in down.stdout, down.stdout + down.stderr
    assert len(pids) == 6 and not any(pid_alive(pid) for pid in pids)
    assert not list((tmp_path / "cluster").glob("*.pid"))
