"""Every broker process the launcher starts, wherever its files live: found and stopped by ``make down``.

A comparison (``make compare``, notebook 11, a test) starts its RabbitMQ nodes, epmd and
nats-servers under a folder of its own (often a temporary one that is gone by the time anybody
looks), so their pid files cannot be how ``make down`` finds them. Instead each start writes one
small record under ``<run dir>/brokers/`` (``$LAB_RUN_DIR`` or ``.run``, see
:func:`labs.launcher.topology.default_run_dir`): the kind (``rabbitmq``, ``nats``), the pid, the
process's start time (a pid reused by another program is never signalled), and the *owner*: the
pid of the Python process whose life the broker shares (None for ``make up-rabbitmq``, whose
brokers outlive the command by design).

- :func:`record` / :func:`forget`: written by :class:`labs.launcher.broker_process.BrokerProcess`
  on start and stop;
- :func:`stop_registered`: ``python -m labs down`` stops every live recorded process (of some kinds);
- :func:`stop_owned_by`: what :mod:`labs.launcher.reaper` runs once an owner is gone (a notebook's
  kernel killed, a run interrupted), so no broker outlives the process that started it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from labs.launcher.process import STOP_TIMEOUT_S, pid_alive, signal_and_wait, stat_fields

log = logging.getLogger(__name__)

FOLDER = "brokers"


def registry_dir(run_dir: Path | None = None) -> Path:
    """``<run dir>/brokers/``: one JSON file per live broker process started from this run dir."""
    from labs.launcher.topology import default_run_dir  # local: topology imports the Redis side

    return Path(run_dir or default_run_dir()).resolve() / FOLDER


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if gone."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


@dataclass(frozen=True)
class Entry:
    """One recorded broker process."""

    kind: str  # rabbitmq | nats | redis (the comparison's own Redis)
    name: str  # rabbit-5680, epmd, nats-4230
    pid: int
    start_ticks: int
    pidfile: str  # the launcher's pid file of it (the record's key)
    owner_pid: int | None = None
    owner_ticks: int | None = None

    def alive(self) -> bool:
        """Still the same process: running, and started when it was recorded."""
        return pid_alive(self.pid) and start_ticks(self.pid) == self.start_ticks

    def owner_gone(self) -> bool:
        if self.owner_pid is None:
            return False
        return not pid_alive(self.owner_pid) or start_ticks(self.owner_pid) != self.owner_ticks


def _path(pidfile: Path, run_dir: Path | None) -> Path:
    digest = hashlib.sha1(str(pidfile.resolve()).encode()).hexdigest()[:16]
    return registry_dir(run_dir) / f"{pidfile.stem}-{digest}.json"


def record(kind: str, name: str, pid: int, pidfile: Path, owner_pid: int | None = None,
           run_dir: Path | None = None) -> Entry | None:
    """Record a process the launcher just started (None when it is already gone)."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    owner_ticks = start_ticks(owner_pid) if owner_pid is not None else None
    entry = Entry(kind, name, pid, ticks, str(pidfile.resolve()), owner_pid, owner_ticks)
    path = _path(pidfile, run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(entry)) + "\n")
    tmp.replace(path)
    return entry


def forget(pidfile: Path, run_dir: Path | None = None) -> None:
    _path(pidfile, run_dir).unlink(missing_ok=True)


def entries(run_dir: Path | None = None) -> list[tuple[Path, Entry]]:
    """Every record (an unreadable one is dropped)."""
    folder = registry_dir(run_dir)
    found = []
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        try:
            found.append((path, Entry(**json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
    return found


def stop_entry(entry: Entry, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM to the process group, SIGKILL after ``timeout_s``, then SIGKILL to what is left of the group;
    the pid, or None when that process was gone already."""
    if not entry.alive():
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(entry.pid, signal.SIGTERM)
    signal_and_wait(entry.name, entry.pid, signal.SIGTERM, timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(entry.pid, signal.SIGKILL)
    Path(entry.pidfile).unlink(missing_ok=True)
    return entry.pid


def _stop(selected: Iterable[tuple[Path, Entry]]) -> list[int]:
    # epmd last: a RabbitMQ node that is stopping still talks to it
    ordered = sorted(selected, key=lambda item: item[1].name == "epmd")
    stopped = []
    for path, entry in ordered:
        try:
            if (pid := stop_entry(entry)) is not None:
                stopped.append(pid)
                log.info("stopped %s %s (pid %s)", entry.kind, entry.name, pid)
        finally:
            path.unlink(missing_ok=True)
    return stopped


def stop_registered(kinds: Iterable[str] | None = None, run_dir: Path | None = None) -> list[int]:
    """Stop every recorded live process (of ``kinds``, all when None); the pids stopped."""
    wanted = set(kinds) if kinds is not None else None
    return _stop((p, e) for p, e in entries(run_dir) if wanted is None or e.kind in wanted)


def stop_owned_by(owner_pid: int, run_dir: Path | None = None) -> list[int]:
    """Stop every recorded process whose owner is ``owner_pid`` (the reaper's job once it died)."""
    return _stop((p, e) for p, e in entries(run_dir) if e.owner_pid == owner_pid)


def owned_live(owner_pid: int, run_dir: Path | None = None) -> list[Entry]:
    return [e for _p, e in entries(run_dir) if e.owner_pid == owner_pid and e.alive()]
