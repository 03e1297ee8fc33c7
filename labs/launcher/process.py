"""One Redis process started by the launcher: its config, log, pid file and lifecycle.

Processes run in their own session, so they outlive the Python process that started
them (``make up`` returns, the servers stay). They are tracked by pid file, and a pid
file whose process is gone, or belongs to something else, is treated as stale.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.typing import EncodableT

from labs.launcher.errors import LauncherError
from labs.polling import poll, seconds_left

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie (reaping it if it is our child)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return fields is None or fields[0] != "Z"


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (``[0]`` the state, ``[1]`` the parent, ``[11]`` and
    ``[12]`` user and system CPU in clock ticks, ``[19]`` the start time), or None where there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_s(pid: int) -> float | None:
    """A process's CPU time so far (user + system, all its threads; clock ticks, 10 ms on Linux), or None."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def is_redis(pid: int) -> bool:
    """True when ``pid`` looks like a redis (or valkey) process (always true where /proc is absent)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return sys.platform != "linux"
    with contextlib.suppress(OSError):
        raw = cmdline.read_bytes()
        return b"redis" in raw or b"valkey" in raw
    return False


def signal_and_wait(name: str, pid: int, sig: int, timeout_s: float) -> float:
    """Send ``sig`` to ``pid`` and wait until it is gone, with SIGKILL after ``timeout_s``; the deadline reached."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    if poll(lambda: not pid_alive(pid), timeout_s, POLL_S):
        return deadline
    if sig == signal.SIGKILL:
        raise LauncherError(f"{name} (pid {pid}) survived SIGKILL")
    log.warning("%s (pid %s) ignored signal %s; sending SIGKILL", name, pid, sig)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    if not poll(lambda: not pid_alive(pid), timeout_s, POLL_S):
        raise LauncherError(f"{name} (pid {pid}) survived SIGKILL")
    return deadline


def live_pid(pidfile: Path, looks_right: Callable[[int], bool]) -> int | None:
    """The pid in ``pidfile`` while that process runs and ``looks_right``; a stale file is removed."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid_alive(pid) and looks_right(pid):
        return pid
    log.info("removing stale pid file %s (pid %s is gone)", pidfile, pid)
    pidfile.unlink(missing_ok=True)
    return None


@dataclass(frozen=True)
class Launch:
    """What :func:`launch` starts: a process, its port (and the variable that moves it), its files."""

    name: str
    port: int
    port_var: str
    argv: tuple[str, ...]
    home: Path
    pidfile: Path
    logfile: Path
    log_lines: int = 8


def launch(spec: Launch, ready: Callable[[], bool], probe: str, timeout_s: float = START_TIMEOUT_S) -> int:
    """Start ``spec.argv`` in its own session (log and pid file under ``home``), wait until ``ready()``; its pid.

    A busy port, an exit at start, or no answer in time each raise one :class:`LauncherError` line.
    """
    from labs.launcher import ports  # local: keeps the module graph flat

    if ports.in_use(spec.port):
        raise LauncherError(
            f"port {spec.port} is in use by another process; "
            f"set {spec.port_var} to a free port (or stop what listens there)"
        )
    with spec.logfile.open("ab") as out:
        proc = subprocess.Popen(list(spec.argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=spec.home)
    spec.pidfile.write_text(f"{proc.pid}\n")

    def started() -> bool:
        if proc.poll() is not None:
            spec.pidfile.unlink(missing_ok=True)
            raise LauncherError(
                f"{spec.name} (port {spec.port}) exited with code {proc.returncode} at start; "
                f"{spec.logfile}: {log_tail(spec.logfile, spec.log_lines)}"
            )
        return ready()

    if poll(started, timeout_s, POLL_S):
        log.info("started %s on port %s (pid %s)", spec.name, spec.port, proc.pid)
        return proc.pid
    signal_and_wait(spec.name, proc.pid, signal.SIGKILL, STOP_TIMEOUT_S)
    spec.pidfile.unlink(missing_ok=True)
    raise LauncherError(
        f"{spec.name} (port {spec.port}) did not answer {probe} within {timeout_s:.0f} s; "
        f"{spec.logfile}: {log_tail(spec.logfile, spec.log_lines)}"
    )


def log_tail(path: Path, lines: int = 8) -> str:
    """The last lines of a log, joined with `` | `` so that an error stays one line."""
    if not path.exists():
        return "(no log written)"
    text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    return " | ".join(line.strip() for line in text if line.strip()) or "(empty log)"


class SyncCommands(Protocol):
    """Whatever sends a command with ``execute_command`` synchronously (a ``redis.Redis``, a node of a
    cluster), typed here: redis-py leaves ``execute_command`` unannotated. The reply is whatever Redis
    sent (RESP), so ``Any`` until the caller reads it (the sync twin of ``solutions.connection.Commands``)."""

    def execute_command(self, *args: EncodableT, **options: Any) -> Any: ...


def command(client: SyncCommands, *args: EncodableT) -> Any:
    """Run a raw command (``SENTINEL ...``) that redis-py has no typed method for; the reply as Redis sent it."""
    return client.execute_command(*args)


class HomeFiles:
    """The files of a process named ``name`` under ``home``: pid file, log and data directory (a
    base for the launcher's process dataclasses, which declare the two fields)."""

    name: str
    home: Path

    @property
    def pidfile(self) -> Path:
        return self.home / f"{self.name}.pid"

    @property
    def logfile(self) -> Path:
        return self.home / f"{self.name}.log"

    @property
    def data_dir(self) -> Path:
        return self.home / f"{self.name}-data"


@dataclass(frozen=True)
class RedisProcess(HomeFiles):
    """A ``redis-server`` or ``redis-sentinel`` on 127.0.0.1:``port`` under ``home``."""

    name: str
    port: int
    home: Path
    binary: str
    netns: str | None = None  # the network namespace it runs in (labs.launcher.netns), None: the host's
    host: str = "127.0.0.1"  # where the other members reach it (its namespace's address under netns)

    @property
    def conf(self) -> Path:
        return self.home / f"{self.name}.conf"

    def pid(self) -> int | None:
        """The pid from the pid file when that process still runs; a stale file is removed."""
        return live_pid(self.pidfile, is_redis)

    def client(self, timeout_s: float = 1.0) -> redis.Redis:
        """A short-timeout client for probes, without retries; the caller closes it.

        redis-py 8 retries a refused connection 10 times with backoff by default, which
        would turn "is anything there?" into seconds of waiting per probe. In a network
        namespace the probe connects from inside it (its own loopback, never partitioned).
        """
        if self.netns is not None:
            from labs.launcher import netns  # local: only partition runs need it

            return netns.client(self.netns, "127.0.0.1", self.port, timeout_s=timeout_s, decode_responses=True,
                                retry=Retry(NoBackoff(), 0))
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),
        )

    def ping(self) -> bool:
        with contextlib.closing(self.client(0.5)) as client:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

    def start(self, port_var: str) -> int:
        """Start the process from its config and wait until it answers PING."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv: tuple[str, ...] = (self.binary, str(self.conf))
        if self.netns is not None:
            argv = ("ip", "netns", "exec", self.netns, *argv)  # exec: the pid is the server's own
        spec = Launch(self.name, self.port, port_var, argv, self.home, self.pidfile, self.logfile)
        return launch(spec, self.ping, "PING")

    def kill(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Send ``sig`` and wait until the process is gone; return the pid it had."""
        pid = self.pid()
        if pid is None:
            return None
        deadline = signal_and_wait(self.name, pid, sig, timeout_s)
        self.pidfile.unlink(missing_ok=True)
        self._wait_port_closed(deadline)
        return pid

    def _wait_port_closed(self, deadline: float) -> None:
        # A killed redis-server's main thread can be reaped while its other threads still hold
        # the listening socket for a few milliseconds; a restart then would find the port busy.
        from labs.launcher import ports

        port = self.port
        if not port:
            return
        if self.netns is not None:  # the port is the namespace's own: the host's may be anybody's
            from labs.launcher import netns

            ns = self.netns

            def open_() -> bool:
                return netns.call_in(ns, lambda: ports.in_use(port))
        else:

            def open_() -> bool:
                return ports.in_use(port)

        if not poll(lambda: not open_(), seconds_left(deadline), POLL_S / 5):
            where = f" in namespace {self.netns}" if self.netns else ""
            raise LauncherError(f"{self.name}: port {port}{where} stayed open after the process died")
