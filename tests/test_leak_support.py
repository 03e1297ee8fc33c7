"""tests/leak_support.py: a server a test started and left behind is found (and killed); ours are not counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import leak_support
import pytest

from labs.launcher import binaries
from labs.launcher.ports import free_ports, session_port_window
from labs.polling import wait_until

pytestmark = pytest.mark.timeout(60)


def test_a_daemonized_server_left_in_a_temp_dir_is_found_and_killed(tmp_path: Path) -> None:
    since = leak_support.now_ticks()
    port = free_ports(1, session_port_window())[0]
    pidfile = tmp_path / "redis.pid"
    server = binaries.require("redis-server")  # Valkey's valkey-server under REDIS=valkey8
    subprocess.run([server, "--port", str(port), "--dir", str(tmp_path), "--save", "",
                    "--daemonize", "yes", "--pidfile", str(pidfile)], check=True, stdout=subprocess.DEVNULL)
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, "the pid file"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)  # ours: a child
    try:
        found = {p.pid: p for p in leak_support.leftovers(since)}
        assert pid in found and found[pid].name == Path(server).name[:15], found  # comm: 15 characters at most
        assert child.pid not in found  # a descendant of this process is still ours to stop
    finally:
        child.kill()
        child.wait()
    os.kill(pid, signal.SIGKILL)  # only ours: another xdist worker's servers may be orphans of this window too
    wait_until(lambda: pid not in {p.pid for p in leak_support.leftovers(since)}, 10, "the server to be gone")


def test_processes_older_than_the_session_are_not_counted(tmp_path: Path) -> None:
    assert leak_support.leftovers(leak_support.now_ticks() + 10**9) == []
