"""labs.launcher.broker_registry and reaper: no broker outlives its owner, and ``labs down`` finds every one.

Each test runs on a run dir of its own (``LAB_RUN_DIR``, ``LAB_NETNS_REGISTRY``): its ``labs down``
never touches what other tests or the labs run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from compare_support import require_brokers

from labs import polling
from labs.launcher import broker_registry
from labs.launcher.listeners import group_members
from labs.launcher.process import pid_alive

pytestmark = pytest.mark.timeout(240)

# A child process that starts a cluster under a folder of its own, prints every pid of its process
# groups, then waits (to be killed, or to return and exit normally).
OWNER = """
import json, os, sys
from pathlib import Path
from labs.launcher.listeners import group_members
from labs.launcher.nats import NatsCluster
from labs.launcher.rabbitmq import RabbitCluster
kind, home, owned = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "owned"
make = RabbitCluster if kind == "rabbitmq" else NatsCluster
cluster = make.on_free_ports(home, owner_pid=-1 if owned else None)
cluster.ensure()
pids = [m for p in cluster.processes for m in group_members(p.pid())]
print(json.dumps(pids), flush=True)
sys.stdin.readline()
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LAB_RUN_DIR": str(tmp_path / "run"), "LAB_NETNS_REGISTRY": str(tmp_path / "netns")}


def _start_owner(tmp_path: Path, kind: str, owned: bool) -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER, kind, str(tmp_path / "elsewhere"),
                             "owned" if owned else "free"], env=_env(tmp_path), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        pytest.fail(f"the {kind} owner exited with {proc.returncode} before its cluster was ready")
    return proc, json.loads(line)


def _wait_gone(pids: list[int], timeout_s: float, why: str) -> None:
    try:
        polling.wait_until(lambda: not [p for p in pids if pid_alive(p)], timeout_s, why, poll_s=0.2)
    except TimeoutError:
        alive = [p for p in pids if pid_alive(p)]
        pytest.fail(f"{len(alive)} of {len(pids)} broker processes still run after {timeout_s:g} s ({why}): {alive}")


@pytest.mark.parametrize("kind", ["nats", "rabbitmq"])
def test_the_owners_exit_stops_every_broker_process(tmp_path: Path, kind: str) -> None:
    """SIGKILL of the owner (a kernel killed by JupyterLab): its reaper stops nodes, epmd, beam's children."""
    require_brokers(kind)
    owner, pids = _start_owner(tmp_path, kind, owned=True)
    expected = 3 if kind == "nats" else 4  # three servers; or three nodes and epmd
    assert len({p for p in pids if pid_alive(p)}) >= expected, pids
    owner.kill()
    owner.wait(10)
    _wait_gone(pids, 90.0, "the reaper after the owner's SIGKILL (RabbitMQ stops in a few seconds per node)")
    polling.wait_until(lambda: broker_registry.entries(tmp_path / "run") == [], 10, "the reaper removing its records")


def test_labs_down_stops_brokers_whose_files_are_elsewhere(tmp_path: Path) -> None:
    """A comparison's nats-servers (files in a folder ``labs down`` never looks at) stop by ``labs down``."""
    require_brokers("nats")
    owner, pids = _start_owner(tmp_path, "nats", owned=False)
    try:
        owner.communicate("\n", timeout=30)  # the owner exits normally; unowned brokers stay
        assert all(pid_alive(p) for p in pids), "an unowned broker must outlive its starter (make up-nats)"
        status = subprocess.run([sys.executable, "-m", "labs", "status"], env=_env(tmp_path), capture_output=True,
                                text=True, timeout=60, cwd=Path(__file__).resolve().parents[1], check=False)
        assert "nats processes started by comparisons or notebooks: 3" in status.stdout, status.stdout
        down = subprocess.run([sys.executable, "-m", "labs", "down"], env=_env(tmp_path), capture_output=True,
                              text=True, timeout=120, cwd=Path(__file__).resolve().parents[1], check=False)
        assert down.returncode == 0, down.stderr
        assert "stopped 3 process(es)" in down.stdout, down.stdout
        _wait_gone(pids, 10.0, "labs down")
    finally:
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_record_of_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """A record whose pid now belongs to another process (start time differs) is dropped, not killed."""
    me = os.getpid()
    entry = broker_registry.record("nats", "nats-1", me, tmp_path / "x.pid", run_dir=tmp_path)
    assert entry is not None and entry.alive()
    path = broker_registry.entries(tmp_path)[0][0]
    path.write_text(json.dumps({**json.loads(path.read_text()), "start_ticks": entry.start_ticks - 1}) + "\n")
    assert broker_registry.stop_registered(run_dir=tmp_path) == []
    assert pid_alive(me) and broker_registry.entries(tmp_path) == []
    assert group_members(me)[0] == me
