"""labs.launcher.monitoring: exporters and Prometheus as real processes beside real topologies.

The stack (the session's sentinel and aof topologies and the add-on, on the session's free ports)
is ``monitored_stack``, shared with test_alert_faults, test_key_incidents and notebook 10.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from billing_support import wait_until
from monitoring_support import MonitoredStack
from require_support import tagged

from labs.experiments.worker_procs import WorkerProcess
from labs.launcher import prom_binaries
from labs.launcher.errors import LauncherError
from labs.launcher.monitoring import LOOKBACK_S, Monitoring, topology_nodes
from labs.launcher.ports import free_port
from labs.launcher.process import pid_alive
from labs.launcher.rule_scale import format_duration
from labs.launcher.service import http_ok
from labs.launcher.topology import Topology
from labs.launcher.worker_targets import WorkerTarget

pytestmark = [
    pytest.mark.skipif(bool(prom_binaries.missing()), reason=tagged("monitoring", prom_binaries.missing() or "ok")),
    pytest.mark.timeout(120),
]
PREFIX = "mon-test:"


@pytest.fixture
def stack(monitored_stack: MonitoredStack) -> Monitoring:
    return monitored_stack.mon


def _aof(mon: Monitoring) -> Topology:
    return mon.topology("aof")


def _value(mon: Monitoring, expr: str) -> float | None:
    result = mon.api.query(expr)
    return float(result[0]["value"][1]) if result else None


def test_every_node_is_scraped_and_the_ui_answers_on_loopback(stack: Monitoring) -> None:
    stack.ensure()  # whatever else runs in this session (single, say) is watched too
    targets = stack.wait_targets_up(30)
    nodes = {(t.job, t.labels["topology"], t.labels["node"]) for t in targets}
    running = [n for name in stack.running_topologies() for n in topology_nodes(stack.topology(name))]
    expected = {("redis-sentinel" if n.sentinel else "redis", n.topology, f"127.0.0.1:{n.port}") for n in running}
    assert nodes == expected
    assert {("sentinel", 5), ("aof", 1)} <= {(t, sum(n[1] == t for n in nodes)) for t in ("sentinel", "aof")}
    assert all(t.health == "up" for t in targets if t.job.startswith("redis"))
    assert all(t.url.startswith("http://127.0.0.1:") for t in targets)
    assert http_ok(f"{stack.url}/graph")
    assert stack.config_path.exists() and (stack.home / "data").is_dir()
    lab_rules = (stack.rules_dir / "streams.yml").read_text()
    assert lab_rules.startswith("# GENERATED") and "for: 5s" in lab_rules


def test_the_lookback_delta_is_scaled_like_the_rules(stack: Monitoring) -> None:
    # At the production 5 min, samples of a previous life (make down, make up-*) still answer an
    # instant query or an "offset" a lab minute later; scaled, a series is gone after 8 s.
    flags = stack.api.get("status/flags")
    assert flags["query.lookback-delta"] == format_duration(stack.scale.window_s(LOOKBACK_S))


def test_stream_metrics_and_the_collect_script_reach_prometheus(stack: Monitoring) -> None:
    stream = f"{PREFIX}orders"
    with contextlib.closing(redis.Redis.from_url(_aof(stack).url)) as client:
        client.delete(stream)
        client.xgroup_create(stream, "billing", id="$", mkstream=True)
        for i in range(4):
            client.xadd(stream, {"n": i})
        client.xreadgroup("billing", "c1", {stream: ">"}, count=1)
    try:
        # One scrape is not atomic: the exporter's stream check and its Lua script read Redis one after the
        # other, so a scrape that spans the XREADGROUP can say lag 3 (the script, after) and pending 0 (the
        # check, before); the next scrape agrees. Wait for the three together (a noisy run met it: pending 0.0).
        def seen() -> tuple[float | None, ...]:
            return tuple(_value(stack, f'{name}{{stream="{stream}"}}') for name in (
                "stream_group:lag_entries", "stream_group:pending_entries", "redis_stream_length"))

        assert wait_until(lambda: seen() == (3, 1, 4), 20.0, lambda: f"lag, pending, length (3, 1, 4): {seen()}",
                          poll_s=0.3)
        assert (_value(stack, f'stream_group:oldest_pending_age_seconds{{stream="{stream}"}}') or -1) >= 0
    finally:
        with contextlib.closing(redis.Redis.from_url(_aof(stack).url)) as client:
            client.delete(stream)


def test_a_registered_worker_is_scraped_and_its_death_shows_as_down(stack: Monitoring, tmp_path: Path) -> None:
    port = free_port()
    worker = WorkerProcess.start(_aof(stack).url, f"{PREFIX}orders", tmp_path / "ledger.sqlite3", "w1",
                                 tmp_path, metrics_port=port, block_ms=200)
    try:
        stack.register_worker(WorkerTarget(name="w1", port=port, stream=f"{PREFIX}orders", consumer="w1"))

        def health() -> str:
            return next((t.health for t in stack.targets() if t.labels.get("worker") == "w1"), "")

        wait_until(lambda: health() == "up", 30, "worker target up", poll_s=0.3)
        up = stack.api.query('up{job="billing-worker",worker="w1"}')[0]["metric"]
        assert (up["stream"], up["group"], up["consumer"]) == (f"{PREFIX}orders", "billing", "w1")
        worker.kill()
        wait_until(lambda: health() == "down", 20, "worker target down", poll_s=0.3)
    finally:
        worker.kill()
        stack.unregister_worker("w1")
    wait_until(lambda: health() == "", 20, "worker target gone after unregister", poll_s=0.3)


def test_a_dead_exporter_is_one_line_and_ensure_restarts_it(stack: Monitoring) -> None:
    stack.ensure()  # an exporter for every topology running now, the fixture's aof among them
    exporter = stack.exporter(next(node for node in stack.slots() if node.topology == "aof"))
    pid = exporter.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 10, "exporter gone", poll_s=0.3)
    problems = stack.problems()
    assert len(problems) == 1 and problems[0].startswith(f"{exporter.name} is not running;")
    assert "\n" not in problems[0]
    stack.ensure()
    assert exporter.pid() not in (None, pid)
    assert stack.problems() == []
    stack.wait_targets_up(30)


def test_a_busy_port_starts_nothing_and_says_which_variable(stack: Monitoring, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        other = Monitoring(tmp_path / "mon", [_aof(stack)], busy, [free_port()])
        with pytest.raises(LauncherError, match=f"port {busy} \\(prometheus\\) is in use.*LAB_PROMETHEUS_PORT") as exc:
            other.ensure()
    assert "\n" not in str(exc.value)
    assert not other.running()  # the exporter was not started either


def test_a_missing_binary_is_one_line_with_the_install_hint(
    stack: Monitoring, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LauncherError, match="not found on PATH: install") as exc:
        Monitoring(tmp_path / "mon", [_aof(stack)], free_port(), [free_port()]).ensure()
    assert "\n" not in str(exc.value)


def test_make_status_shows_each_target_health(stack: Monitoring) -> None:
    """``python -m labs status`` (``make status``) in the session's environment."""
    done = subprocess.run([sys.executable, "-m", "labs", "status"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"monitoring: Prometheus {stack.url}" in done.stdout
    for name in ("sentinel", "aof"):
        for node in topology_nodes(stack.topology(name)):
            rows = [line for line in done.stdout.splitlines() if f"{name} 127.0.0.1:{node.port} " in line]
            assert rows and "up" in rows[0].split(), (node, done.stdout)
