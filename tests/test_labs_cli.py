"""``python -m labs``: the commands the Makefile runs, as a person sees them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labs.launcher import ports


def _lab(args: list[str], env: dict[str, str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs", *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.fixture
def lab_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, LAB_RUN_DIR=str(tmp_path), COLUMNS="200")
    env[ports.SINGLE_PORT_VAR] = str(ports.free_port())
    return env


def test_up_twice_is_a_noop_and_down_stops_it(lab_env: dict[str, str]) -> None:
    first = _lab(["up", "single"], lab_env)
    assert first.returncode == 0, first.stderr
    assert "started" in first.stdout
    second = _lab(["up", "single"], lab_env)
    assert second.returncode == 0 and "reused" in second.stdout
    status = _lab(["status", "single"], lab_env)
    assert "master" in status.stdout and lab_env[ports.SINGLE_PORT_VAR] in status.stdout
    down = _lab(["down"], lab_env)
    assert down.returncode == 0 and "stopped 1 process" in down.stdout
    assert "no topology is running" in _lab(["status"], lab_env).stdout


def test_busy_port_is_one_line_without_traceback(lab_env: dict[str, str]) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(lab_env[ports.SINGLE_PORT_VAR])))
        squatter.listen()
        result = _lab(["up", "single"], lab_env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: port ")
    assert ports.SINGLE_PORT_VAR in lines[0] and "Traceback" not in result.stderr


def test_help_lists_the_commands_and_ports() -> None:
    result = subprocess.run([sys.executable, "-m", "labs", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    for word in ("up", "status", "failover", "down", "LAB_SINGLE_PORT=6390", "LAB_SENTINEL_PORTS"):
        assert word in result.stdout


def test_status_with_nothing_running_answers_at_once(lab_env: dict[str, str]) -> None:
    """Probes do not retry: a refused port means "not running", not ten backoffs."""
    result = _lab(["status"], lab_env, timeout_s=10)
    assert result.returncode == 0 and "no topology is running" in result.stdout
