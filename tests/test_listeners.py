"""labs.launcher.listeners: every process the launcher starts (all topologies, all brokers) listens on loopback only.

A RabbitMQ node's Erlang distribution port listened on 0.0.0.0 (issue 42); these tests read what
each launched process and its process group really listen on, from /proc, while it runs.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from compare_support import require_brokers
from netns_support import skip_without_netns

from labs.launcher import listeners, topologies
from labs.launcher.nats import NatsCluster
from labs.launcher.rabbitmq import RabbitCluster

pytestmark = pytest.mark.timeout(240)


def _assert_loopback(pids: list[int | None], what: str) -> None:
    running = [p for p in pids if p]
    assert running, f"{what}: nothing runs"
    seen = listeners.listeners(running)
    assert seen, f"{what}: no listening socket found for pids {running} (is /proc readable?)"
    bad = listeners.beyond_loopback(running)
    assert not bad, f"{what} listens beyond loopback: {', '.join(map(str, bad))}"


def test_a_listener_on_every_interface_is_caught() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = (f"import socket,sys;s=socket.socket();s.bind(('0.0.0.0',{port}));s.listen();"
            "print(1,flush=True);sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "1"
        bad = listeners.beyond_loopback([child.pid])
        assert [(b.address, b.port) for b in bad] == [("0.0.0.0", port)], bad
    finally:
        child.kill()
        child.wait(10)


@pytest.mark.parametrize("name", ["single", "aof", "sentinel", "cluster"])
def test_redis_topologies_listen_on_loopback_only(tmp_path: Path, name: str) -> None:
    topo = topologies.on_free_ports(name, tmp_path)
    try:
        topo.ensure()
        _assert_loopback([p.pid() for p in topo.processes], f"the {name} topology")
    finally:
        topo.stop()


def test_a_sentinel_topology_in_namespaces_listens_on_loopback_and_its_fabric_only(tmp_path: Path) -> None:
    skip_without_netns()
    topo = topologies.on_free_ports("sentinel", tmp_path, netns=True)
    try:
        topo.ensure()
        _assert_loopback([p.pid() for p in topo.processes], "the sentinel topology under --netns")
    finally:
        topo.stop()


def test_nats_listens_on_loopback_only(tmp_path: Path) -> None:
    require_brokers("nats")
    cluster = NatsCluster.on_free_ports(tmp_path)
    try:
        cluster.ensure()
        _assert_loopback([p.pid() for p in cluster.processes], "the nats topology")
    finally:
        cluster.stop()


def test_rabbitmq_nodes_epmd_and_distribution_listen_on_loopback_only(tmp_path: Path) -> None:
    require_brokers("rabbitmq")
    cluster = RabbitCluster.on_free_ports(tmp_path)
    try:
        cluster.ensure()
        pids = [p.pid() for p in cluster.processes]
        _assert_loopback(pids, "the rabbitmq topology")
        ports = {item.port for item in listeners.listeners([p for p in pids if p])}
        missing = set(cluster.dist_ports) - ports
        assert not missing, f"distribution ports {sorted(missing)} not found among the nodes' listeners {ports}"
    finally:
        cluster.stop()


def test_nats_in_namespaces_listens_on_its_fabric_addresses_only(tmp_path: Path) -> None:
    require_brokers("nats")
    skip_without_netns()
    cluster = NatsCluster.on_free_ports(tmp_path).in_namespaces()
    try:
        cluster.ensure()
        _assert_loopback([p.pid() for p in cluster.processes], "the nats topology under namespaces")
    finally:
        cluster.stop()


def test_rabbitmq_in_namespaces_listens_on_its_fabric_addresses_only(tmp_path: Path) -> None:
    require_brokers("rabbitmq")
    skip_without_netns()
    cluster = RabbitCluster.on_free_ports(tmp_path).in_namespaces()
    try:
        cluster.ensure()
        _assert_loopback([p.pid() for p in cluster.processes], "the rabbitmq topology under namespaces")
    finally:
        cluster.stop()
