"""``kill -9`` of the reference worker in the middle of a handling, then a rescue: how many effects?

:func:`crash_and_rescue` starts ``billing-worker`` (``python -m solutions.billing``) as a
subprocess on a fresh stream with one event, waits until it holds the message (its
handler sleeps ``handler_delay_ms``), kills it with ``SIGKILL``, and runs a second worker in this
process (``solutions.worker.Worker``) whose rescuer reclaims the dead worker's entry once
its idle passes ``min_idle_ms``; once that is settled, the producer re-sends the same
event (a new message, the same ``event_id``). The effects are the rows of the SQLite
ledger's ``charges`` table for the event.

- ``--dedupe redis`` (the course's marker): the marker outlives the dead process, the
  rescue sees "already done" and acks: the work is lost (0 effects).
- ``--dedupe redis-2phase``: the marker says "in progress" until the work is committed;
  the rescue redoes it: 1 effect.
- ``--dedupe sqlite``: the charge and the ``applied_events`` row commit together: 1 effect.

Only the contract-stable surface of ``solutions`` is used (the CLI, ``Settings``,
``Worker.run`` / ``request_stop``, the ledger schema). Tests in ``tests/test_worker_crash.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import redis
from redis.typing import EncodableT, FieldT

from labs.experiments import scenario_settings
from labs.polling import poll_async
from solutions.settings import Settings
from solutions.worker import Worker

GROUP = "billing"
CRASHED = "crashed-host-1"
RESCUER = "rescuer-host-2"


@dataclass(frozen=True)
class CrashRun:
    """One crash-and-rescue run."""

    dedupe: str
    effects_at_crash: int
    effects: int
    pending_left: int
    elapsed_s: float


def charges_for(ledger: Path, event_id: str) -> int:
    """Rows in ``charges`` for ``event_id`` (0 when the ledger or its table does not exist yet)."""
    if not ledger.exists():
        return 0
    with contextlib.closing(sqlite3.connect(ledger, timeout=5)) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM charges WHERE event_id = ?", (event_id,)).fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def worker_command(redis_url: str, stream: str, dedupe: str, ledger: Path, handler_delay_ms: int) -> list[str]:
    """The ``billing-worker`` command line of the process that will be killed."""
    return [
        sys.executable, "-m", "solutions.billing",
        "--redis-url", redis_url, "--stream", stream, "--group", GROUP, "--consumer", CRASHED,
        "--dedupe", dedupe, "--ledger", str(ledger), "--handler-delay-ms", str(handler_delay_ms),
        "--min-idle-ms", "300", "--claim-interval-ms", "100", "--block-ms", "200",
        "--metrics-interval-s", "60", "--order-key", "",
    ]  # fmt: skip


def rescuer_settings(redis_url: str, stream: str, dedupe: str, ledger: Path) -> Settings:
    """The in-process worker that picks the dead worker's entry up (min idle 300 ms, every 100 ms)."""
    return replace(scenario_settings.base(stream, ledger, redis_url=redis_url), consumer=RESCUER, dedupe=dedupe,
                   handler_delay_ms=5, min_idle_ms=300, claim_interval_ms=100, order_key="")


async def crash_and_rescue(
    redis_url: str,
    stream: str,
    *,
    dedupe: str,
    ledger: Path,
    handler_delay_ms: int = 4000,
    timeout_s: float = 20.0,
    resend_while_pending: bool = False,
) -> CrashRun:
    """Kill a worker inside its handler, rescue, re-send the event; count the event's charges.

    With ``resend_while_pending`` the re-send is added right after the kill, so the rescuing
    worker handles it and the reclaimed original close together.
    """
    started = time.monotonic()
    event_id = f"evt-{uuid.uuid4().hex[:8]}"
    fields: dict[FieldT, EncodableT] = {
        "type": "order.paid", "order_id": "o-1", "amount": "10.00", "event_id": event_id
    }
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        client.delete(stream)
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        client.xadd(stream, fields)
        command = worker_command(redis_url, stream, dedupe, ledger, handler_delay_ms)
        await kill_inside_handler(client, command, timeout_s)
        at_crash = charges_for(ledger, event_id)
        if resend_while_pending:  # the re-send arrives while the dead worker's entry still waits
            client.xadd(stream, fields)
        worker = Worker(rescuer_settings(redis_url, stream, dedupe, ledger))
        task = asyncio.create_task(worker.run())
        try:
            await poll_async(lambda: _settled(client, stream, ledger, event_id, dedupe), timeout_s)
            if not resend_while_pending:
                client.xadd(stream, fields)  # then the producer re-sends the same event
            await poll_async(lambda: _settled(client, stream, ledger, event_id, dedupe), timeout_s)
        finally:
            worker.request_stop()
            await asyncio.wait_for(task, timeout=timeout_s)
        pending = int(client.xpending(stream, GROUP)["pending"])
    return CrashRun(dedupe, at_crash, charges_for(ledger, event_id), pending, time.monotonic() - started)


async def kill_inside_handler(client: redis.Redis, command: list[str], timeout_s: float) -> None:
    """Start ``command`` (a billing-worker as :data:`CRASHED`), wait until it holds the message, ``SIGKILL`` it."""
    stream = command[command.index("--stream") + 1]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        held = await poll_async(lambda: _held_by(client, stream, CRASHED), timeout_s)
        await asyncio.sleep(0.3)  # well inside the handler's sleep
    finally:
        proc.kill()
        proc.wait(timeout=10)
    if not held:
        raise RuntimeError(f"billing-worker never took the message: {' '.join(command)}")


def _held_by(client: redis.Redis, stream: str, consumer: str) -> bool:
    rows = client.xpending_range(stream, GROUP, "-", "+", 10)
    return any(row["consumer"] == consumer for row in rows)


def _settled(client: redis.Redis, stream: str, ledger: Path, event_id: str, dedupe: str) -> bool:
    # Both messages acked; with a strategy that does not lose work, the charge is in.
    if int(client.xpending(stream, GROUP)["pending"]) or client.xinfo_groups(stream)[0]["lag"]:
        return False
    return dedupe == "redis" or charges_for(ledger, event_id) >= 1


