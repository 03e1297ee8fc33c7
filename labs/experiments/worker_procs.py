"""``billing-worker`` and ``billing-producer`` as subprocesses, and the facts to check them by.

The experiments of notebook 07 drive workers only through the lab contract: the console
scripts' flags (``python -m solutions.billing`` by default, or the command in ``$WORKER``, as
lab 3 does; the producer is always ``python -m solutions.producer``), the SQLite ``charges``
table, and the group's PEL. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import redis

from labs.polling import wait_until as wait_until  # re-exported: notebook 07 and the experiments
from solutions.ledger import read_rows

GROUP = "billing"
ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def worker_command() -> list[str]:
    """The worker to run: ``$WORKER`` (a shell-style command) or the reference one."""
    custom = os.environ.get("WORKER")
    return shlex.split(custom) if custom else [sys.executable, "-m", "solutions.billing"]


def producer_command() -> list[str]:
    """The producer: always the reference one (as in lab 3, only the worker is swapped)."""
    return [sys.executable, "-m", "solutions.producer"]


def flags(**values: object) -> list[str]:
    """``handler_delay_ms=5`` -> ``["--handler-delay-ms", "5"]``."""
    out: list[str] = []
    for name, value in values.items():
        out += [f"--{name.replace('_', '-')}", str(value)]
    return out


@dataclass
class WorkerProcess:
    """One ``billing-worker`` subprocess whose log (stdout and stderr) goes to a file."""

    proc: subprocess.Popen[bytes]
    consumer: str
    log_path: Path

    @classmethod
    def start(
        cls, redis_url: str, stream: str, ledger: Path, consumer: str, log_dir: Path, **more: object
    ) -> WorkerProcess:
        """Start a worker; ``more`` are extra flags (``min_idle_ms=300`` is ``--min-idle-ms 300``)."""
        defaults: dict[str, object] = {"block_ms": 200, "metrics_interval_s": 60, "handler_delay_ms": 0}
        args = flags(redis_url=redis_url, stream=stream, group=GROUP, consumer=consumer, ledger=ledger,
                     **{**defaults, **more})
        log_path = log_dir / f"{consumer}.log"
        with log_path.open("wb") as out:  # a consumer name reused later starts a fresh log
            proc = subprocess.Popen([*worker_command(), *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        return cls(proc, consumer, log_path)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        """True while it runs; RuntimeError with the log's tail if it has exited (fail fast)."""
        if self.proc.poll() is None:
            return True
        tail = "\n".join(self.log_text().splitlines()[-15:])
        raise RuntimeError(f"worker {self.consumer} exited with {self.proc.returncode}:\n{tail}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """Send ``sig`` (if still running) and wait for the exit code; SIGKILL and raise if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL if it still runs (the clean-up path of a failed experiment)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def start_producer(redis_url: str, stream: str, log_dir: Path, *, rate: float, count: int) -> subprocess.Popen[bytes]:
    """``billing-producer --rate R --count N`` in the background (its log in ``producer.log``)."""
    with (log_dir / "producer.log").open("ab") as out:
        return subprocess.Popen(
            [*producer_command(), *flags(redis_url=redis_url, stream=stream, rate=rate, count=count)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
        )


def produce_backlog(client: redis.Redis, stream: str, n: int, *, with_event_ids: bool = False) -> list[str]:
    """XADD ``n`` valid ``order.paid`` events in one pipeline; their message ids (or event ids)."""
    tag = f"{time.time_ns():x}"
    event_ids = [f"ev-{tag}-{i}" for i in range(n)]
    pipe = client.pipeline(transaction=False)
    for i, event_id in enumerate(event_ids):
        pipe.xadd(stream, {"type": "order.paid", "order_id": f"o-{i % 20}", "amount": "10.00", "event_id": event_id})
    msg_ids = [str(r) for r in pipe.execute()]
    return event_ids if with_event_ids else msg_ids


@dataclass(frozen=True)
class Charge:
    """One row of the ledger's ``charges`` table."""

    event_id: str
    msg_id: str
    consumer: str
    charged_at: float  # unix seconds

    @property
    def lag_s(self) -> float:
        """Processing lag: when it was charged minus the timestamp in its message id."""
        return self.charged_at - int(self.msg_id.split("-", 1)[0]) / 1000


def charges(ledger: Path) -> list[Charge]:
    """Every charge in insertion order; none while the worker has not created the table yet."""
    rows = read_rows(ledger, "SELECT event_id, msg_id, consumer, charged_at FROM charges ORDER BY rowid")
    return [Charge(str(e), str(m), str(c), float(t)) for e, m, c, t in rows]


def pending_ids(client: redis.Redis, stream: str, group: str = GROUP) -> set[str]:
    """Every id in the group's PEL (``XPENDING stream group - + N``); empty without the group."""
    try:
        rows = client.xpending_range(stream, group, "-", "+", 100_000)
    except redis.ResponseError as exc:
        if "NOGROUP" in str(exc):
            return set()
        raise
    return {str(row["message_id"]) for row in rows}


def delivered_ids(client: redis.Redis, stream: str, group: str = GROUP) -> set[str]:
    """Ids the group has handed out: every entry up to its ``last-delivered-id`` (XINFO GROUPS)."""
    info = next(g for g in client.xinfo_groups(stream) if str(g["name"]) == group)
    last = str(info["last-delivered-id"])
    return {str(msg_id) for msg_id, _ in client.xrange(stream, "-", last) or []}


