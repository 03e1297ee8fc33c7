"""Helpers shared by the tests of the ``solutions`` package (worker in-process or as a subprocess)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import redis
from redis.typing import EncodableT

from labs.launcher.process import RedisProcess
from labs.polling import until as until  # the one polling rule (labs/polling.py)
from labs.polling import wait_until as wait_until
from solutions.handler import BillingHandler, Handler
from solutions.ledger import Ledger, read_rows
from solutions.messages import OrderEvent
from solutions.settings import Settings
from solutions.worker import Worker

ROOT = Path(__file__).resolve().parents[1]
FAST = {"block_ms": 200, "metrics_interval_s": 60.0, "drain_timeout_s": 5.0}


class SyncCommands(Protocol):
    """A sync client (``redis.Redis``, ``RedisCluster``) seen through a typed ``execute_command``:
    redis-py leaves it unannotated. The reply is whatever Redis sent."""

    def execute_command(self, *args: EncodableT, **options: Any) -> Any: ...


def command(client: SyncCommands, *args: EncodableT) -> Any:
    """``client.execute_command(*args)``, typed (see :class:`SyncCommands`); the reply as Redis sent it."""
    return client.execute_command(*args)


def settings(url: str, prefix: str, ledger: Path, **overrides: Any) -> Settings:
    """Test settings: the stream and group under the test's key prefix, short BLOCK."""
    values: dict[str, Any] = {
        "redis_url": url,
        "stream": f"{prefix}orders",
        "group": "billing",
        "ledger": ledger,
        "handler_delay_ms": 0,
        **FAST,
    }
    values.update(overrides)
    return Settings(**values)


@contextlib.asynccontextmanager
async def running(s: Settings, handler: Handler | None = None, ledger: Ledger | None = None) -> AsyncIterator[Worker]:
    """A worker running as a task for the duration of the block, then drained."""
    worker = Worker(s, handler=handler, ledger=ledger)
    task = asyncio.create_task(worker.run())
    await until(lambda: worker.started.is_set() or task.done(), 10, "the worker to start")
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, s.drain_timeout_s + 10)


def produce(client: redis.Redis, stream: str, n: int, *, orders: int = 10, start: int = 0) -> list[str]:
    """XADD ``n`` valid events (event ids ``ev-<i>``) in one pipeline; returns their message ids."""
    pipe = client.pipeline(transaction=False)
    for i in range(start, start + n):
        pipe.xadd(stream, {"type": "order.paid", "order_id": f"o-{i % orders}", "amount": "10.00",
                           "event_id": f"ev-{i}"})
    return [r.decode() if isinstance(r, bytes) else r for r in pipe.execute()]


def ledger_rows(ledger: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a query on a worker's ledger; none while the worker has not created it yet."""
    return read_rows(ledger, sql)


def charges(ledger: Path) -> list[tuple[str, str, str, str]]:
    """``(event_id, order_id, msg_id, consumer)`` of every charge, in insertion order."""
    rows = ledger_rows(ledger, "SELECT event_id, order_id, msg_id, consumer FROM charges ORDER BY id")
    return [(str(e), str(o), str(m), str(c)) for e, o, m, c in rows]


def charge_counts(ledger: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event_id, *_ in charges(ledger):
        counts[event_id] = counts.get(event_id, 0) + 1
    return counts


def pending_ids(client: redis.Redis, stream: str, group: str) -> set[str]:
    try:
        rows = client.xpending_range(stream, group, "-", "+", 100_000)
    except redis.ResponseError as exc:  # no stream or group yet
        if "NOGROUP" in str(exc):
            return set()
        raise
    return {r["message_id"].decode() if isinstance(r["message_id"], bytes) else r["message_id"] for r in rows}


def command_calls(client: redis.Redis, command: str) -> int:
    """``INFO commandstats`` calls of ``command`` on this server (the whole server): a counter to poll."""
    stats = client.info("commandstats").get(f"cmdstat_{command.lower()}")
    return int(stats["calls"]) if stats else 0


def error_count(proc: RedisProcess, code: str) -> int:
    """``INFO errorstats``: how many error replies with this code the node has sent."""
    with contextlib.closing(proc.client()) as client:
        stats = client.info("errorstats")
    return int(stats.get(f"errorstat_{code}", {}).get("count", 0))


def xreadgroup_calls(client: redis.Redis) -> int:
    """``INFO commandstats`` calls of XREADGROUP on this server (the whole server)."""
    return command_calls(client, "xreadgroup")


async def claim_rounds(client: redis.Redis, rounds: int, timeout_s: float = 10.0) -> None:
    """Wait until the rescuers on this server have run ``rounds`` more XAUTOCLAIM calls."""
    target = command_calls(client, "xautoclaim") + rounds
    await until(lambda: command_calls(client, "xautoclaim") >= target, timeout_s, f"{rounds} claim rounds")


LOCK_HOLDER = """
import sqlite3, sys
dbs = [sqlite3.connect(path, isolation_level=None) for path in sys.argv[1:]]
for db in dbs:
    db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()  # held until the test says so (or goes away)
for db in dbs:
    db.execute("COMMIT")
"""


def hold_ledger_lock(*ledgers: Path) -> subprocess.Popen[str]:
    """Another process takes the write lock of each ledger (``BEGIN IMMEDIATE``) and holds them
    until :func:`release_ledger_lock`; returns once it holds them all."""
    proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, *map(str, ledgers)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def release_ledger_lock(proc: subprocess.Popen[str]) -> None:
    """Let the lock holder commit and exit."""
    assert proc.stdin is not None
    proc.stdin.close()
    code = proc.wait(10)
    assert code == 0, f"the ledger lock holder exited {code} (0: it committed and released the lock)"


def spawn(module: str, *args: str, log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``python -m <module> args`` with stderr (the logs) into ``log_path``."""
    out = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})},
    )


def worker_args(url: str, stream: str, ledger: Path, consumer: str, **flags: Any) -> list[str]:
    args = ["--redis-url", url, "--stream", stream, "--ledger", str(ledger), "--consumer", consumer,
            "--block-ms", "200", "--metrics-interval-s", "60", "--handler-delay-ms", "0"]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


@contextlib.contextmanager
def reaped(*procs: subprocess.Popen[Any]) -> Any:
    """Kill (SIGKILL) whatever of ``procs`` still runs when the block exits, even on failure."""
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 20) -> int:
    """Signal a process we started and wait for its exit code (SIGKILL if it hangs)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise


class CountingHandler(BillingHandler):
    """The lab's handler with a delay, counting its process() calls and how many run at once."""

    def __init__(self, stream: str = "orders", delay_ms: int = 20) -> None:
        super().__init__(stream=stream, delay_ms=delay_ms)
        self.calls = self.now = self.peak = 0

    async def process(self, event: OrderEvent) -> None:
        self.calls += 1
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await super().process(event)
        finally:
            self.now -= 1
