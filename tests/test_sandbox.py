"""labs.grading.sandbox: what a job in the grading sandbox sees and may do, checked from inside and from outside.

Each test runs a small command job (no nbgrader, no kernel) in a real bubblewrap sandbox, as
``make grade`` runs a lab checker: a uid of its own, its own pid and network namespace, its own
redis-server, the course's packages read-only and nothing else of the checkout, a tmpfs for its
files. The command prints what it found as JSON; the test also looks from outside (a listener on
the machine's loopback, a process of its own, the host's /tmp, the uids' processes afterwards).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from labs.grading import bwrap, cgroup, cli
from labs.grading.limits import Limits
from labs.grading.sandbox import RunReport, Sandbox, SandboxSpec

ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(cell_timeout_s=20, notebook_timeout_s=60, lab_timeout_s=60, memory_mb=256, nproc=64, disk_mb=16,
                output_kb=64)
pytestmark = pytest.mark.timeout(180)

PROBE = r'''
import json, os, socket, subprocess, sys
import redis
found = {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "cwd": os.getcwd()}
found["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
found["project"] = sorted(os.listdir(sys.argv[1]))
found["notebooks"] = sorted(os.listdir(os.path.join(sys.argv[1], "notebooks")))
found["root"] = sorted(os.listdir("/"))
found["env"] = dict(os.environ)
found["redis"] = redis.Redis.from_url(os.environ["REDIS_URL"]).ping()
found["interfaces"] = sorted(os.listdir("/sys/class/net")) if os.path.exists("/sys/class/net") else None
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).sendall(b"from the sandbox")
    found["connected"] = True
except OSError as exc:
    found["connected"] = type(exc).__name__
try:
    os.kill(int(sys.argv[3]), 9)
    found["killed"] = True
except OSError as exc:
    found["killed"] = type(exc).__name__
outside = (os.path.join(sys.argv[1], sys.argv[4]), os.path.join(sys.argv[1], "labs", sys.argv[4]))
for path in ("/tmp/" + sys.argv[4], *outside):
    try:
        open(path, "w").write("x")
        found.setdefault("wrote", []).append(path)
    except OSError as exc:
        found.setdefault("refused", []).append(type(exc).__name__)
try:
    with open(os.path.expanduser("~/fill"), "wb") as handle:
        while True:
            handle.write(b"x" * 1024 * 1024)
            handle.flush()
except OSError as exc:
    found["disk"] = [exc.errno, os.path.getsize(os.path.expanduser("~/fill")) // (1024 * 1024)]
try:
    bytearray(8 * 1024 ** 3)
except MemoryError:
    found["memory"] = "MemoryError"
print(json.dumps(found))
'''


def _require_sandbox() -> None:
    if reason := bwrap.unavailable_reason():
        if os.geteuid() == 0:
            pytest.fail(f"the grading sandbox must work here (root): {reason}")
        pytest.skip(f"the grading sandbox needs root: {reason}")


def _spec(tmp_path: Path, contained: bool = True, uid: int = 0, release: Path | None = None) -> SandboxSpec:
    return SandboxSpec(str(tmp_path / "box"), LIMITS.to_json(), contained, uid or bwrap.UidPool(1).base,
                       str(release) if release else None, str(tmp_path / "logs"))


def _run(tmp_path: Path, command: list[str], *, files: Sequence[Path] = (), contained: bool = True,
         wall_s: float = 60, uid: int = 0, release: Path | None = None) -> tuple[RunReport, str]:
    spec = _spec(tmp_path, contained, uid, release)
    output: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "output":
            output.append(str(event["text"]))

    report = Sandbox(spec).run("probe", "command", files=files, command=command, wall_s=wall_s, on_event=on_event)
    return report, "".join(output)


@pytest.fixture()
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on the machine's loopback that records every byte it gets."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                received.append(conn.recv(1024) or b"<connected>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    server.close()


def test_a_job_sees_only_its_own_world(tmp_path: Path, listener: tuple[int, list[bytes]]) -> None:
    _require_sandbox()
    port, received = listener
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    release = tmp_path / "release"
    release.mkdir()
    (release / "05_x.ipynb").write_text("{}", encoding="utf-8")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    marker = f"sandbox-probe-{uuid.uuid4().hex[:8]}"
    try:
        report, output = _run(tmp_path, ["{python}", "{work}/probe.py", str(ROOT), str(port), str(victim.pid), marker],
                              files=[probe], release=release)
        assert victim.poll() is None, "the sandbox killed a process of the machine"
    finally:
        victim.kill()
    found = json.loads(output.strip().splitlines()[-1])
    assert report.finished and report.ready_s is not None, (report, output)
    assert found["uid"] >= bwrap.UID_BASE and found["gid"] == found["uid"]  # not root, a uid of its own
    assert max(found["pids"]) < 50 and found["pid"] < 50, found["pids"]  # its own pid namespace: a handful
    assert found["project"] == sorted([".venv", "labs", "notebooks", "solutions"]), found["project"]
    assert found["notebooks"] == ["05_x.ipynb"]  # the release, not the answer key
    assert found["redis"] is True and found["connected"] == "ConnectionRefusedError" and received == []
    assert found["killed"] == "ProcessLookupError"
    assert "wrote" in found and found["wrote"] == ["/tmp/" + marker], found  # its own /tmp only
    assert not Path("/tmp", marker).exists() and not (ROOT / marker).exists()
    assert found["disk"][0] == 28 and found["disk"][1] <= LIMITS.disk_mb  # ENOSPC at its tmpfs
    assert found["memory"] == "MemoryError"
    env = found["env"]  # exactly what the sandbox sets: nothing of the grader's (SUBMISSIONS, its PWD, a socket)
    assert set(env) - {"PWD"} == set(Sandbox(_spec(tmp_path))._env("redis://x", bwrap.HOME, "/t")), env
    assert env.get("PWD", bwrap.HOME) == bwrap.HOME and env["HOME"] == bwrap.HOME
    log = Path(report.log_path).read_text(encoding="utf-8")
    assert "bwrap, uid" in log and "exit code 0" in log


@pytest.fixture(params=["cgroup", "rlimits only"])
def limited_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways the sandbox holds its limits: with a cgroup (where root can make one) and with rlimits alone."""
    if request.param == "cgroup" and cgroup.available() is None:
        pytest.skip(cgroup.unavailable_reason() or "no cgroup")
    if request.param == "rlimits only":
        monkeypatch.setattr(cgroup, "available", lambda: None)
    return str(request.param)


def test_a_job_past_its_wall_limit_is_stopped_with_everything_it_started(tmp_path: Path, limited_by: str) -> None:
    _require_sandbox()
    spin = "import os, subprocess, sys, time\n" \
           "for _ in range(5): subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n" \
           "os.fork() or time.sleep(600)\ntime.sleep(600)\n"
    script = tmp_path / "spin.py"
    script.write_text(spin, encoding="utf-8")
    pool_uid = bwrap.UidPool(1).base
    report, _ = _run(tmp_path, ["{python}", "{work}/spin.py"], files=[script], wall_s=8, uid=pool_uid)
    assert report.timed_out and report.wall_s < 8 + 15, report
    left = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) == pool_uid]
    assert not left, f"processes of the sandbox's uid left: {left}"


def test_a_fork_bomb_meets_the_process_limit(tmp_path: Path, limited_by: str) -> None:
    _require_sandbox()
    bomb = "import os, time\nn = 0\ntry:\n    while n < 10000:\n        if os.fork() == 0:\n" \
           "            os.dup2(os.open(os.devnull, os.O_WRONLY), 1); os.dup2(1, 2)\n" \
           "            time.sleep(60); os._exit(0)\n        n += 1\nexcept OSError as exc:\n" \
           "    print('refused after', n, exc.errno)\n"
    script = tmp_path / "bomb.py"
    script.write_text(bomb, encoding="utf-8")
    _, output = _run(tmp_path, ["{python}", "{work}/bomb.py"], files=[script], wall_s=60)
    assert "refused after" in output and int(output.split()[2]) < LIMITS.nproc, output
    assert output.split()[3] == "11"  # EAGAIN


def test_unsafe_mode_runs_the_same_job_as_the_grader(tmp_path: Path) -> None:
    report, output = _run(tmp_path, ["{python}", "-c", "import os; print(os.getuid())"], contained=False,
                          uid=os.getuid())
    assert report.finished and output.strip() == str(os.getuid())
    assert "UNSAFE" in Path(report.log_path).read_text(encoding="utf-8")


def test_without_bwrap_grading_stops_with_one_line_unless_told_to_run_unsafe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: None)
    (tmp_path / "in").mkdir()
    code = cli.main(["grade", str(tmp_path / "in"), "--notebooks", "05", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 2 and "no bwrap on PATH" in out and "--unsafe-no-sandbox" in out
    assert "apt-get install bubblewrap" in out and not (tmp_path / "out").exists()


def _uid(entry: Path) -> int | None:
    try:
        return entry.stat().st_uid
    except OSError:
        return None


def test_the_overhead_summary_pairs_the_two_ways() -> None:
    from labs.grading.overhead import Sample, summary

    samples = [Sample(True, "05", 10.0, 0.3, 5.0, True), Sample(False, "05", 9.0, 0.1, 4.5, True),
               Sample(True, "05", 12.0, 0.3, 5.0, False), Sample(False, "05", 9.0, 0.1, 4.5, True)]
    lines = summary(samples)
    assert lines[0].startswith("sandboxed  : 2 runs, median 11.00 s") and "1 did not finish" in lines[0]
    assert lines[2] == ("the sandbox's cost: +2.00 s a run (start +0.20 s, kernel and setup cell +0.50 s), +22 %")


def test_binds_under_tmp_get_a_tmp_of_their_own(tmp_path: Path) -> None:
    """A checkout under /tmp (a clean clone there) put its binds under the sandbox's /tmp, and bwrap could not
    make /tmp the link into the home ("Can't make symlink at /tmp: File exists"): every sandbox ended at once."""
    _require_sandbox()
    assert tmp_path.is_relative_to("/tmp"), tmp_path  # the case itself: a bound folder under /tmp
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "marker").write_text("bound\n", encoding="utf-8")
    inbox = tmp_path / "in"
    inbox.mkdir()
    args = bwrap.command(inbox, ["/bin/sh", "-c", f"cat {tools}/marker && echo written > /tmp/x && cat /tmp/x"],
                         uid=bwrap.UidPool(1).base, env={"PATH": "/usr/bin:/bin"}, rlimits={}, release_dir=None,
                         redis_bin_dir=tools, disk_mb=16)
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["bound", "written"], (done.returncode, done.stdout,
                                                                                 done.stderr)
