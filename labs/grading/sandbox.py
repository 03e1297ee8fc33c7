"""One submission's sandbox: a directory, a Redis of its own, and every process it started killed afterwards.

A :class:`Sandbox` owns a directory (the course copy, its temp files, its Redis data) and a
``redis-server`` on a port of its own whose ``redis.conf`` takes away, through the ACL of the
default user, the commands that would let a submission end or wipe the server or reach another
(``FLUSHALL``, ``FLUSHDB``, ``SHUTDOWN``, ``DEBUG``, ``REPLICAOF``, ``MIGRATE``, ...): they
answer ``NOPERM``, which fails only the cell that sent them. Even allowed, they would hit this
submission's Redis alone.

Every process started for the submission (nbgrader, its kernel, the Redis servers an
experiment starts in its own session, a lab worker) inherits :data:`TAG_VAR`; :meth:`Sandbox.kill_all`
finds them by that variable in ``/proc/<pid>/environ`` and kills them, so nothing outlives the
grading of a submission, whichever session it moved to. The launcher's own topologies (a
notebook's Sentinel or cluster, lab 3's) get ports and a run directory of the sandbox's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

import redis

from labs.launcher import binaries, ports

log = logging.getLogger(__name__)

TAG_VAR = "LABS_GRADING_SANDBOX"
DENIED = ("flushall", "flushdb", "shutdown", "debug", "replicaof", "slaveof", "migrate", "module", "failover",
          "monitor", "sync", "psync")
START_TIMEOUT_S = 10.0
EXPORTER_SLOTS = 16  # one exporter port per node of every topology, as the test session picks them


def redis_conf(port: int, data_dir: Path) -> str:
    """The sandbox server's config: loopback, no persistence, the dangerous commands denied (ACL)."""
    denied = " ".join(f"-{command}" for command in DENIED)
    return "\n".join(
        [
            f"port {port}",
            "bind 127.0.0.1",
            f'dir "{data_dir}"',
            'save ""',
            "appendonly no",
            "enable-debug-command no",
            f"user default on nopass ~* &* +@all {denied}",
            f'logfile "{data_dir / "redis.log"}"',
            "",
        ]
    )


def tagged_pids(tag: str, root: Path | None = None) -> list[int]:
    """Processes whose environment carries ``TAG_VAR=tag``, or whose working directory is under ``root``.

    The environment alone misses every ``redis-server``: Redis sets its process title over the
    memory that ``/proc/<pid>/environ`` shows, so the tag is gone from it (a grading run left one
    server per submission behind). A server's working directory is its ``dir``, which the sandbox's
    own and every topology an experiment starts keep under the sandbox's directory.
    """
    needle = f"{TAG_VAR}={tag}".encode()
    inside = str(root.resolve()) if root is not None else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0") or (
                    inside is not None and _is_under(os.readlink(entry / "cwd"), inside)):
                found.append(int(entry.name))
    return found


def _is_under(path: str, root: str) -> bool:
    path = path.removesuffix(" (deleted)")
    return path == root or path.startswith(root + os.sep)


class Sandbox:
    """A submission's directory and Redis; a context manager that kills everything it started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tag = f"{root.name}-{uuid.uuid4().hex[:8]}"
        self.port = 0
        self._redis: subprocess.Popen[bytes] | None = None
        self._lab_env: dict[str, str] = {}

    @property
    def redis_url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` of the sandbox's own server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of everything run for the submission: its Redis, its temp dir, the tag."""
        env = dict(base if base is not None else os.environ)
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env.update(
            {
                TAG_VAR: self.tag,
                "REDIS_URL": self.redis_url,
                "TMPDIR": str(tmp),
                "JUPYTER_RUNTIME_DIR": str(self.root / "runtime"),
                "IPYTHONDIR": str(self.root / "ipython"),
                "MPLCONFIGDIR": str(tmp),
                **self._lab_env,
            }
        )
        return env

    def pick_lab_ports(self) -> None:
        """The launcher's topologies (a notebook's Sentinel, cluster, monitoring) on ports and a run dir of
        the sandbox's own, so two submissions' experiments never meet (``labs.launcher.ports`` variables)."""
        singles = (ports.SINGLE_PORT_VAR, ports.AOF_PORT_VAR, ports.MASTER_PORT_VAR, ports.REPLICA_PORT_VAR,
                   ports.PROMETHEUS_PORT_VAR)
        picked = ports.free_ports(len(singles) + 3 + EXPORTER_SLOTS, ports.session_port_window())
        self._lab_env = dict(zip(singles, map(str, picked), strict=False))
        self._lab_env[ports.SENTINEL_PORTS_VAR] = ",".join(map(str, picked[len(singles) : len(singles) + 3]))
        self._lab_env[ports.EXPORTER_PORTS_VAR] = ",".join(map(str, picked[len(singles) + 3 :]))
        self._lab_env[ports.CLUSTER_PORTS_VAR] = ",".join(map(str, ports.free_cluster_ports(6)))
        self._lab_env["LAB_RUN_DIR"] = str(self.root / "run")
        self._lab_env["LAB_REPORTS_DIR"] = str(self.root / "reports")

    def start_redis(self) -> None:
        """Start the sandbox's ``redis-server`` and wait until it answers PING."""
        data_dir = self.root / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.port = ports.free_ports(1, ports.session_port_window())[0]
        conf = data_dir / "redis.conf"
        conf.write_text(redis_conf(self.port, data_dir), encoding="utf-8")
        self._redis = subprocess.Popen(
            [binaries.require("redis-server"), str(conf)], env=self.env(), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            if self._redis.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the sandbox's redis-server on {self.port} did not start (see {data_dir / 'redis.log'})")

    def redis_alive(self) -> bool:
        """True while the sandbox's server runs and answers."""
        with contextlib.suppress(redis.RedisError):
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        return False

    def kill_all(self, *, keep_redis: bool = False) -> int:
        """SIGKILL every process tagged with this sandbox (its Redis too unless ``keep_redis``); how many."""
        killed = 0
        spared = {self._redis.pid} if keep_redis and self._redis is not None else set()
        for _ in range(3):  # a dying parent may still spawn: sweep until nothing is left
            pids = [pid for pid in tagged_pids(self.tag, self.root) if pid not in spared]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.05)
        if self._redis is not None and not keep_redis:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._redis.wait(timeout=5)
        return killed

    def __enter__(self) -> Sandbox:
        self.root.mkdir(parents=True, exist_ok=True)
        self.start_redis()
        self.pick_lab_ports()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        killed = self.kill_all()
        log.debug("sandbox %s: killed %d process(es)", self.tag, killed)
