"""A tiny watcher that stops an owner's brokers once the owner is gone: ``python -m labs.launcher.reaper``.

A notebook kernel or ``make compare`` that starts RabbitMQ nodes and nats-servers stops them
itself (``Sites.stop``, ``atexit``), but a kernel killed by JupyterLab's shutdown or by SIGKILL
runs none of that, and the brokers live in sessions of their own (they must not die with a
cell's Ctrl-C). So the first broker an owner starts also starts one reaper for that owner: a
separate process (a session of its own too) that blocks on the owner's pidfd (Linux >= 5.3;
elsewhere a check every second) and, when the owner exits by any means, stops every process
:mod:`labs.launcher.broker_registry` recorded for it, then exits. One reaper per owner and run dir.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from labs.launcher import broker_registry
from labs.launcher.process import pid_alive

log = logging.getLogger(__name__)
CHECK_S = 1.0


def _pidfile(owner_pid: int, run_dir: Path | None) -> Path:
    return broker_registry.registry_dir(run_dir) / f"reaper-{owner_pid}.pid"


def running(owner_pid: int, run_dir: Path | None = None) -> int | None:
    """The pid of the reaper watching ``owner_pid`` when it runs."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(_pidfile(owner_pid, run_dir).read_text())
        if pid_alive(pid):
            return pid
    return None


def ensure(owner_pid: int, run_dir: Path | None = None) -> int:
    """Start the reaper of ``owner_pid`` unless it runs; its pid."""
    if (pid := running(owner_pid, run_dir)) is not None:
        return pid
    folder = broker_registry.registry_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "labs.launcher.reaper", "--owner", str(owner_pid), "--run-dir", str(folder.parent)]
    with (folder / "reaper.log").open("ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=Path(__file__).resolve().parents[2])
    _pidfile(owner_pid, run_dir).write_text(f"{proc.pid}\n")
    return proc.pid


def wait_for_exit(owner_pid: int) -> None:
    """Return once ``owner_pid`` has exited (a pidfd where the kernel has one, else a check every second)."""
    try:
        fd = os.pidfd_open(owner_pid)
    except (AttributeError, OSError):
        while pid_alive(owner_pid):
            time.sleep(CHECK_S)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.launcher.reaper")
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s reaper %(message)s")
    wait_for_exit(args.owner)
    stopped = broker_registry.stop_owned_by(args.owner, args.run_dir)
    log.info("owner %s exited; stopped %d broker process(es): %s", args.owner, len(stopped), stopped)
    _pidfile(args.owner, args.run_dir).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
