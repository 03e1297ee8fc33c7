"""Inside the sandbox: the submission's Redis, then one notebook (or one lab checker), each cell reported on a pipe.

:mod:`labs.grading.sandbox` starts ``python -m labs.grading.runner <job.json> <fd>`` as the
sandbox's uid. The runner:

1. makes itself non-dumpable (the kernel, same uid, can then neither ptrace it nor open its
   ``/proc/<pid>/fd``) and keeps the report pipe ``fd`` out of every child it starts;
2. copies the job's files from the read-only input folder into the work folder (the
   submission's own copy, on the sandbox's tmpfs) and starts ``redis-server`` there (loopback of
   the sandbox's own network namespace; the ACL of :data:`DENIED` refuses what would end or wipe
   it, ``NOPERM`` fails only the cell that sent it);
3. ``notebook``: runs it with :class:`~labs.grading.kernel.ResilientExecute` and writes one JSON
   line per finished code cell (its outputs and execution count); ``command``: runs a lab checker
   and writes its output; then a last line, ``done`` or ``exit``.

It writes nothing else anywhere the grader reads: the grader takes only the outputs from these
lines and scores them outside, with its own copy of the notebook. Before a new kernel, and in a
sandbox only, every other process of the sandbox's uid is killed (``kill(-1)`` reaches only its
own pid namespace and its own uid) and Redis is started again.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import redis

from labs.polling import wait_until

log = logging.getLogger("labs.grading.runner")

DENIED = ("flushall", "flushdb", "shutdown", "debug", "replicaof", "slaveof", "migrate", "module", "failover",
          "monitor", "sync", "psync")
START_TIMEOUT_S = 20.0
PR_SET_DUMPABLE = 4


def redis_conf(port: int, data_dir: Path) -> str:
    """The submission's server: loopback, no persistence, the dangerous commands denied (ACL)."""
    denied = " ".join(f"-{command}" for command in DENIED)
    return "\n".join([
        f"port {port}",
        "bind 127.0.0.1",
        f'dir "{data_dir}"',
        'save ""',
        "appendonly no",
        "enable-debug-command no",
        f"user default on nopass ~* &* +@all {denied}",
        f'logfile "{data_dir / "redis.log"}"',
        "",
    ])


class Reporter:
    """JSON lines on the report pipe, one per event."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)
        self._out: IO[str] = os.fdopen(fd, "w", encoding="utf-8")

    def emit(self, event: str, **fields: object) -> None:
        self._out.write(json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n")
        self._out.flush()


class Server:
    """The sandbox's ``redis-server``, started (again) on demand."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.binary = str(spec["binary"])
        self.port = int(spec["port"])
        self.dir = Path(spec["dir"])
        self.proc: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        with contextlib.suppress(redis.RedisError):
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        return False

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "redis.conf"
        conf.write_text(redis_conf(self.port, self.dir), encoding="utf-8")
        self.proc = subprocess.Popen([self.binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.alive() or self.proc is None or self.proc.poll() is not None, START_TIMEOUT_S,
                   f"redis-server on {self.port}", poll_s=0.02)
        if not self.alive():
            raise RuntimeError(f"redis-server on {self.port} did not start (see {self.dir / 'redis.log'})")

    def ensure(self) -> None:
        if not self.alive():
            log.warning("the sandbox's redis-server is gone: starting it again")
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def not_dumpable() -> None:
    """No ptrace, no ``/proc/<pid>/fd`` of the runner for the kernel (same uid) from here on."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def sweep(contained: bool) -> None:
    """Kill every other process of the sandbox (only in one: its pid namespace and uid bound ``kill(-1)``)."""
    if contained and os.getuid() != 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)


def run_notebook(job: dict[str, Any], out: Reporter, server: Server) -> None:
    from labs import nbtypes
    from labs.grading.kernel import ResilientExecute

    notebook = nbtypes.read(Path(job["input_dir"]) / job["notebook"])
    limits = job["limits"]

    last = [time.monotonic()]

    def report(index: int, cell: nbtypes.NotebookNode) -> None:
        now = time.monotonic()
        log.info("cell %d done in %.1f s", index, now - last[0])
        last[0] = now
        out.emit("cell", index=index, outputs=cell.get("outputs", []), execution_count=cell.get("execution_count"))

    def before_restart() -> None:
        sweep(bool(job["contained"]))
        server.ensure()

    client = ResilientExecute(notebook, cell_timeout_s=int(limits["cell_timeout_s"]),
                              output_limit=int(limits["output_kb"]) * 1024, on_cell=report,
                              before_restart=before_restart, resources={"metadata": {"path": job["work_dir"]}})
    log.info("nbclient imported; starting the kernel")
    client.execute_notebook()
    out.emit("done", restarts=client.restarts)


def run_command(job: dict[str, Any], out: Reporter) -> None:
    limit = int(job["limits"]["output_kb"]) * 1024
    proc = subprocess.Popen(job["command"], cwd=job["work_dir"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    stdout = proc.stdout.fileno()
    kept = 0
    for chunk in iter(lambda: os.read(stdout, 65536), b""):
        if kept < limit:
            out.emit("output", text=chunk[: limit - kept].decode("utf-8", errors="replace"))
        kept += len(chunk)
    out.emit("exit", code=proc.wait(), truncated=kept > limit)


def prepare(job: dict[str, Any]) -> None:
    """The home's folders (``/tmp`` points into it) and the job's files copied into the work folder."""
    for key in ("tmp_dir", "work_dir"):
        Path(job[key]).mkdir(parents=True, exist_ok=True)
    for name in job.get("files", []):
        shutil.copy2(Path(job["input_dir"]) / name, Path(job["work_dir"]) / name)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="runner %(levelname)s: %(message)s", stream=sys.stderr)
    started = time.monotonic()
    job: dict[str, Any] = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    out = Reporter(int(argv[2]))
    not_dumpable()
    prepare(job)
    server = Server(job["redis"])
    server.start()
    out.emit("ready", seconds=round(time.monotonic() - started, 3), uid=os.getuid())
    try:
        if job["kind"] == "notebook":
            run_notebook(job, out, server)
        else:
            run_command(job, out)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
