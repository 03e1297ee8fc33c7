"""A long-running helper process that is not Redis: an exporter or Prometheus, with an HTTP probe.

Like :class:`labs.launcher.process.RedisProcess`, it runs in its own session (it outlives ``make
up-monitoring``), is tracked by a pid file under the run directory, and a pid file whose process
is gone or runs something else is stale. Readiness is an HTTP GET on 127.0.0.1 that answers 200.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from labs.launcher.process import STOP_TIMEOUT_S, HomeFiles, Launch, launch, live_pid, log_tail, signal_and_wait
from labs.launcher.prom_binaries import EXPORTERS

log = logging.getLogger(__name__)

START_TIMEOUT_S = 15.0


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """True when ``GET url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return int(reply.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass(frozen=True)
class ServiceProcess(HomeFiles):
    """``argv`` listening on 127.0.0.1:``port``, its files named ``name`` under ``home``."""

    name: str
    port: int
    home: Path
    argv: tuple[str, ...]
    probe_path: str = "/"

    @property
    def argvfile(self) -> Path:
        return self.home / f"{self.name}.argv"

    def runs_current_argv(self) -> bool:
        """True when the running process was started with this ``argv`` (a changed flag needs a restart)."""
        try:
            return tuple(json.loads(self.argvfile.read_text())) == self.argv
        except (OSError, ValueError):
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The pid from the pid file when that process still runs our binary; a stale file is removed."""
        return live_pid(self.pidfile, lambda pid: _runs(pid, self.argv[0] if self.argv else ""))

    def ready(self) -> bool:
        return http_ok(self.url + self.probe_path)

    def exit_reason(self) -> str:
        """One line on why a process that should run does not: its log's last lines."""
        return f"{self.name} is not running; {self.logfile}: {log_tail(self.logfile, 3)}"

    def start(self, port_var: str) -> int:
        """Start it and wait until the probe answers; a busy port names the variable that moves it."""
        self.home.mkdir(parents=True, exist_ok=True)
        spec = Launch(self.name, self.port, port_var, self.argv, self.home, self.pidfile, self.logfile, log_lines=3)
        pid = launch(spec, self.ready, self.probe_path, START_TIMEOUT_S)
        self.argvfile.write_text(json.dumps(self.argv))
        return pid

    def send(self, sig: int) -> bool:
        """Send ``sig`` (SIGHUP: Prometheus reloads its config); False when it does not run."""
        pid = self.pid()
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        return True

    def kill(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Send ``sig`` and wait until the process is gone (SIGKILL after ``timeout_s``); its pid."""
        pid = self.pid()
        if pid is None:
            return None
        signal_and_wait(self.name, pid, sig, timeout_s)
        self.pidfile.unlink(missing_ok=True)
        return pid


def _runs(pid: int, binary: str) -> bool:
    """True when ``pid`` runs ``binary`` (by name; the exporter under either of its names).

    Always true where there is no /proc; a pid file is never trusted without a binary to compare.
    """
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True
    names = {Path(binary).name}
    if names & set(EXPORTERS):
        names |= set(EXPORTERS)
    with contextlib.suppress(OSError):
        first = cmdline.read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        return Path(first).name in names
    return False
