"""One broker process (a RabbitMQ node, its epmd, a nats-server) that the launcher starts and tracks.

Like :class:`labs.launcher.process.RedisProcess`: it runs in a session of its own (it outlives
``make up-rabbitmq``), is tracked by its pid file under ``.run/<broker>/``, and a pid file whose
process is gone or is something else is stale. Stopping signals the whole process group, so a
RabbitMQ node's ``erl_child_setup`` goes with it.

Every start is also recorded in :mod:`labs.launcher.broker_registry` (so ``make down`` finds the
process wherever its files are), and a process with an ``owner_pid`` gets that owner's
:mod:`labs.launcher.reaper`, which stops it once the owner has exited by any means.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labs import polling
from labs.launcher import broker_registry, reaper
from labs.launcher.process import STOP_TIMEOUT_S, HomeFiles, Launch, launch, live_pid, signal_and_wait

LOG_LINES = 8


def cmdline_has(pid: int, *needles: bytes) -> bool:
    """True when ``/proc/<pid>/cmdline`` contains one of ``needles`` (true where /proc is absent)."""
    path = Path(f"/proc/{pid}/cmdline")
    if not path.exists():
        return True
    with contextlib.suppress(OSError):
        raw = path.read_bytes()
        return any(n in raw for n in needles)
    return False


@dataclass(frozen=True)
class BrokerProcess(HomeFiles):
    """A process on 127.0.0.1:``port`` with its files under ``home``, recognised by ``marker`` in its cmdline."""

    name: str
    port: int
    home: Path
    marker: bytes
    extra_env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    kind: str = ""  # rabbitmq | nats: how the registry files it (``make down rabbitmq``)
    owner_pid: int | None = None  # stopped when this process exits (its reaper); None: outlives it
    netns: str | None = None  # the network namespace it runs in (labs.launcher.netns), None: the host's

    def pid(self) -> int | None:
        """The pid from the pid file while that process runs; a stale file is removed."""
        return live_pid(self.pidfile, lambda pid: cmdline_has(pid, self.marker))

    def start(self, argv: list[str], port_var: str, ready: Callable[[], bool], probe: str, timeout_s: float) -> int:
        """Start ``argv`` with :attr:`extra_env` (a busy port names ``port_var``); wait until ``ready()``.

        The environment goes through ``env K=V ... argv``: ``env`` execs the command, so the pid
        in the pid file is the broker's own (under ``ip netns exec``, which execs too, in its namespace).
        The pid is recorded in :mod:`labs.launcher.broker_registry`; with an ``owner_pid`` its reaper runs.
        """
        self.home.mkdir(parents=True, exist_ok=True)
        full = ["env", *(f"{k}={v}" for k, v in self.extra_env.items()), *argv]
        if self.netns is not None:
            full = ["ip", "netns", "exec", self.netns, *full]
        spec = Launch(self.name, self.port, port_var, tuple(full), self.home, self.pidfile, self.logfile, LOG_LINES)
        if self.owner_pid is not None:
            reaper.ensure(self.owner_pid)
        pid = launch(spec, ready, probe, timeout_s)
        broker_registry.record(self.kind or self.name, self.name, pid, self.pidfile, self.owner_pid)
        return pid

    def kill(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Signal the process group and wait until the process is gone (SIGKILL after ``timeout_s``)."""
        pid = self.pid()
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        signal_and_wait(self.name, pid, sig, timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # what is left of its group (erl_child_setup, inet_gethost)
        self.pidfile.unlink(missing_ok=True)
        broker_registry.forget(self.pidfile)
        if self.netns is None:
            self._wait_port_closed(timeout_s)
        return pid

    def _wait_port_closed(self, timeout_s: float) -> None:
        """The kernel closes a killed process's listening socket a moment after the process is gone;
        a restart in that moment would find its own port "in use"."""
        from labs.launcher import ports

        polling.poll(lambda: not ports.in_use(self.port), timeout_s, poll_s=0.05)


def _rss_of(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_bytes(pid: int | None) -> int:
    """The resident set size of ``pid``'s whole process group from /proc (a RabbitMQ node is a shell
    script whose ``beam.smp`` is a child; 0 when it is gone or /proc is absent)."""
    if pid is None:
        return 0
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pid:  # field 5: the process group
                total += _rss_of(int(stat.parent.name))
    return total or _rss_of(pid)
