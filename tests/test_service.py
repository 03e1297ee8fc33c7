"""labs.launcher.service: a non-Redis helper process with a pid file, an HTTP probe and one-line errors."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import pytest

from labs.launcher.errors import LauncherError
from labs.launcher.ports import free_port
from labs.launcher.process import pid_alive
from labs.launcher.service import ServiceProcess, http_ok

pytestmark = pytest.mark.timeout(60)


def _http_server(tmp_path: Path, port: int, name: str = "web") -> ServiceProcess:
    argv = (sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port))
    return ServiceProcess(name, port, tmp_path, argv, "/")


def test_start_probe_pid_and_stop(tmp_path: Path) -> None:
    svc = _http_server(tmp_path, free_port())
    pid = svc.start("LAB_TEST_PORT")
    try:
        assert svc.pid() == pid and svc.ready()
        assert http_ok(f"{svc.url}/")
    finally:
        assert svc.kill() == pid
    assert not pid_alive(pid)
    assert svc.pid() is None and not svc.pidfile.exists()


def test_a_busy_port_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LauncherError, match=f"port {port} is in use.*set LAB_TEST_PORT") as exc:
            _http_server(tmp_path, port).start("LAB_TEST_PORT")
    assert "\n" not in str(exc.value)


def test_a_process_that_dies_at_start_says_why_from_its_log(tmp_path: Path) -> None:
    svc = ServiceProcess("broken", free_port(), tmp_path, (sys.executable, "-c", "import sys; sys.exit('no config')"))
    with pytest.raises(LauncherError, match=r"exited with code 1 at start.*no config"):
        svc.start("LAB_TEST_PORT")
    assert svc.pid() is None


def test_a_pid_file_of_another_program_is_stale(tmp_path: Path) -> None:
    svc = _http_server(tmp_path, free_port())
    pid = svc.start("LAB_TEST_PORT")
    try:
        other = ServiceProcess("web", svc.port, tmp_path, ("prometheus",))  # same pid file, another binary
        assert other.pid() is None  # the pid runs python, not prometheus: the file is stale for it
        assert pid_alive(pid)
    finally:
        if pid_alive(pid):
            import os

            os.kill(pid, signal.SIGKILL)
