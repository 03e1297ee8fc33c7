"""Processes a test session left behind: servers and orphans started during it that outlive it.

Every test, notebook and sandbox must stop what it started (Redis, Sentinel, Valkey, RabbitMQ's
Erlang VM and epmd, NATS, Prometheus, the exporter, Chromium, a kernel or a worker). A process
counts as left behind when all of these hold at the end of the session:

- it started after the session did (``/proc/<pid>/stat`` start time, in clock ticks since boot);
- it is not a descendant of the session's own process (xdist workers and what they still run);
- it is one of the server binaries above, or an orphan (its parent is init) of any kind;
- its working directory is under the session's own temporary directory (``tests/conftest.py`` points
  ``TMPDIR`` there for the whole session): a lab you started by hand with ``make up`` lives under the
  checkout's ``.run/``, and a second session's servers under its own directory, so neither is counted.

The grading sandbox once left a ``redis-server`` per submission this way (Redis hides the tag its
environment carried); this check is what would have said so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labs.launcher.process import stat_fields
from labs.polling import poll

SERVERS = ("redis-server", "redis-sentinel", "valkey-server", "valkey-sentinel", "redis-check-rdb", "beam.smp",
           "epmd", "nats-server", "prometheus", "redis_exporter", "prometheus-redi", "chromium", "chrome")
SETTLE_S = 10.0  # a process sent SIGTERM at the end of its test may take a moment to go


@dataclass(frozen=True)
class Leftover:
    pid: int
    name: str
    cwd: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} {self.name} (cwd {self.cwd}): {self.command[:160]}"


def now_ticks() -> int:
    """Clock ticks since boot, the unit of a process's start time in ``/proc/<pid>/stat``."""
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    return int(uptime_s * os.sysconf("SC_CLK_TCK"))


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in ticks) of ``pid``."""
    fields = stat_fields(pid)
    return None if fields is None else (fields[0], int(fields[1]), int(fields[19]))


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[1], []).append(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def leftovers(since_ticks: int, *, tmp: str | None = None) -> list[Leftover]:
    """The processes left behind (see the module docstring)."""
    tmp_dir = os.path.realpath(tmp or tempfile.gettempdir())
    ours = _descendants(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat[0] == "Z" or stat[2] < since_ticks:
            continue
        with contextlib.suppress(OSError):
            name = (entry / "comm").read_text().strip()
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
            if not (cwd == tmp_dir or cwd.startswith(tmp_dir + os.sep)):
                continue
            if name.startswith(SERVERS) or stat[1] == 1:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                found.append(Leftover(pid, name, cwd, command))
    return found


def settle_and_kill(since_ticks: int, settle_s: float = SETTLE_S, *, tmp: str | None = None) -> list[Leftover]:
    """What is still left under ``tmp`` after ``settle_s``; each is then killed (SIGKILL) so runs do not pile up."""
    left: list[Leftover] = []

    def gone() -> bool:
        left[:] = leftovers(since_ticks, tmp=tmp)
        return not left

    poll(gone, settle_s, poll_s=0.5)
    for process in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGKILL)
    return left
