"""Graceful shutdown (the drain) of a ``billing-worker`` subprocess, measured on real Redis and its ledger.

Notebook 07 calls these. They drive only the contract every lab relies on (the console
scripts as subprocesses, the SQLite ``charges`` table, the PEL), so they work for any worker
that follows it:

- :func:`sigterm_under_load`: a backlog plus a running producer, SIGTERM in the middle; what
  the worker held at the signal, what it acked, what it charged, how it exited.
- :func:`drain_timeout_then_rescue`: a handler slower than the drain budget; SIGTERM leaves
  its messages in the PEL (the log names them), and a second worker's rescuer charges each
  one exactly once.
- :func:`python_signal_default`: what a plain Python process does on SIGTERM and SIGINT
  when nobody installed a handler (the trap behind "drain complete" never showing up).
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import redis

from labs.experiments.worker_procs import (
    GROUP,
    WorkerProcess,
    charges,
    delivered_ids,
    pending_ids,
    produce_backlog,
    start_producer,
    wait_until,
)

DRAIN_LINE = re.compile(r"drain complete.*?left_pending=(\d+)(?: ids=(\S+))?")


@dataclass(frozen=True)
class DrainLine:
    """The worker's last word: how many ids it left pending, and which."""

    text: str
    left_pending: int
    ids: tuple[str, ...]


def drain_line(log_text: str) -> DrainLine | None:
    """The last ``drain complete ... left_pending=N [ids=a,b]`` line of a worker log, parsed."""
    found = None
    for line in log_text.splitlines():
        if match := DRAIN_LINE.search(line):
            ids = tuple(match.group(2).split(",")) if match.group(2) else ()
            found = DrainLine(line.strip(), int(match.group(1)), ids)
    return found


@dataclass(frozen=True)
class SigtermRun:
    """What :func:`sigterm_under_load` saw."""

    exit_code: int
    signal_to_exit_s: float
    drain: DrainLine | None
    in_hand_at_signal: frozenset[str]
    delivered: frozenset[str]
    pending_after: frozenset[str]
    charged: frozenset[str]
    backlog: int
    stream_length: int

    @property
    def acked(self) -> frozenset[str]:
        """Delivered to the group and no longer pending: the worker XACKed them."""
        return self.delivered - self.pending_after


def sigterm_under_load(
    redis_url: str,
    stream: str,
    run_dir: Path,
    *,
    backlog: int = 300,
    rate: float = 200.0,
    handler_delay_ms: int = 30,
    charges_before_signal: int = 40,
    timeout_s: float = 20.0,
) -> SigtermRun:
    """Backlog + producer + one worker; SIGTERM once it has charged some and holds more."""
    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
    ledger = run_dir / f"sigterm-{time.time_ns():x}.sqlite3"
    produce_backlog(client, stream, backlog)
    worker = WorkerProcess.start(
        redis_url, stream, ledger, "w-sigterm", run_dir,
        handler_delay_ms=handler_delay_ms, parallelism=8, count=16,
    )
    producer = start_producer(redis_url, stream, run_dir, rate=rate, count=int(rate * timeout_s))
    try:
        wait_until(lambda: worker.alive() and len(charges(ledger)) >= charges_before_signal, timeout_s,
                   "the first charges")
        in_hand = pending_ids(client, stream)
        started = time.monotonic()
        code = worker.stop(signal.SIGTERM, timeout_s)
        took_s = time.monotonic() - started
    finally:
        worker.kill()
        _stop(producer)
    run = SigtermRun(
        exit_code=code,
        signal_to_exit_s=took_s,
        drain=drain_line(worker.log_text()),
        in_hand_at_signal=frozenset(in_hand),
        delivered=frozenset(delivered_ids(client, stream)),
        pending_after=frozenset(pending_ids(client, stream)),
        charged=frozenset(c.msg_id for c in charges(ledger)),
        backlog=backlog,
        stream_length=int(client.xlen(stream)),
    )
    client.close()
    return run


@dataclass(frozen=True)
class RescueRun:
    """What :func:`drain_timeout_then_rescue` saw."""

    exit_code: int
    held_at_signal: frozenset[str]
    drain: DrainLine | None
    pending_after_stop: frozenset[str]
    charged_by_slow: int
    rescuer_drain: DrainLine | None
    rescuer_log: str
    charges_per_event: dict[str, int]
    events: frozenset[str]
    pending_at_end: frozenset[str]

    @property
    def reclaimed(self) -> int:
        """The rescuer's ``reclaimed`` counter, from its drain line."""
        match = re.search(r"reclaimed=(\d+)", self.rescuer_drain.text if self.rescuer_drain else "")
        return int(match.group(1)) if match else 0


def drain_timeout_then_rescue(
    redis_url: str,
    stream: str,
    run_dir: Path,
    *,
    events: int = 12,
    in_hand: int = 4,
    slow_handler_ms: int = 2000,
    drain_timeout_s: float = 0.3,
    min_idle_ms: int = 300,
    timeout_s: float = 20.0,
    dedupe: str = "sqlite",
) -> RescueRun:
    """A slow worker is stopped with a drain budget shorter than its handler; a rescuer finishes.

    Both run with ``--dedupe dedupe``. With a strategy that marks events before the work
    (``redis``, ``redis-2phase``), the marks of the runs the deadline cancelled must go with
    them, or the rescuer acks those events as duplicates and never charges them."""
    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
    ledger = run_dir / f"rescue-{time.time_ns():x}.sqlite3"
    event_ids = produce_backlog(client, stream, events, with_event_ids=True)
    slow = WorkerProcess.start(
        redis_url, stream, ledger, "w-slow", run_dir,
        handler_delay_ms=slow_handler_ms, drain_timeout_s=drain_timeout_s, count=in_hand, parallelism=in_hand,
        dedupe=dedupe,
    )
    try:
        wait_until(lambda: slow.alive() and len(pending_ids(client, stream)) >= in_hand, timeout_s,
                   f"{in_hand} messages in hand")
        held = frozenset(pending_ids(client, stream))
        code = slow.stop(signal.SIGTERM, timeout_s)
    finally:
        slow.kill()
    after_stop = frozenset(pending_ids(client, stream))
    charged_by_slow = len(charges(ledger))
    rescuer = _rescue(client, redis_url, stream, ledger, run_dir, events=events, min_idle_ms=min_idle_ms,
                      timeout_s=timeout_s, dedupe=dedupe)
    per_event = Counter(c.event_id for c in charges(ledger))
    run = RescueRun(
        exit_code=code,
        held_at_signal=held,
        drain=drain_line(slow.log_text()),
        pending_after_stop=after_stop,
        charged_by_slow=charged_by_slow,
        rescuer_drain=drain_line(rescuer.log_text()),
        rescuer_log=rescuer.log_text(),
        charges_per_event=dict(per_event),
        events=frozenset(event_ids),
        pending_at_end=frozenset(pending_ids(client, stream)),
    )
    client.close()
    return run


def _rescue(
    client: redis.Redis, redis_url: str, stream: str, ledger: Path, run_dir: Path, *,
    events: int, min_idle_ms: int, timeout_s: float, dedupe: str,
) -> WorkerProcess:
    """A second worker whose rescuer claims what is idle; stopped once everything is charged."""
    rescuer = WorkerProcess.start(
        redis_url, stream, ledger, "w-rescuer", run_dir, min_idle_ms=min_idle_ms, claim_interval_ms=200, dedupe=dedupe,
    )
    try:
        try:
            wait_until(lambda: rescuer.alive() and len(charges(ledger)) >= events and not pending_ids(client, stream),
                       timeout_s, "every event charged and the PEL empty")
        except TimeoutError as exc:  # say where it stood: the lease's holder, the PEL, the rescuer's log
            lease = client.get(f"{stream}:{GROUP}:rescuer")
            tail = "\n  ".join(rescuer.log_text().splitlines()[-8:])
            pel = sorted(pending_ids(client, stream))
            raise TimeoutError(f"{exc}: {len(charges(ledger))}/{events} charged, PEL {pel}, rescuer lease held "
                               f"by {lease!r}; w-rescuer's log ends:\n  {tail}") from None
        rescuer.stop(signal.SIGTERM, timeout_s)
    finally:
        rescuer.kill()
    return rescuer


SIGNAL_PROBE = """
import time
try:
    print("ready", flush=True)
    time.sleep(30)
finally:
    print("cleanup ran", flush=True)
"""


@dataclass(frozen=True)
class SignalOutcome:
    """How a Python process without signal handlers ended on one signal."""

    signal_name: str
    returncode: int
    cleanup_ran: bool
    output: str


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition. A shell without job
    control starts background commands (``make test &``, nohup) with SIGINT ignored, and
    Python keeps an inherited "ignore" instead of installing its KeyboardInterrupt handler,
    so the probe would show the launcher's setting instead of Python's default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def python_signal_default(sig: int, timeout_s: float = 10.0) -> SignalOutcome:
    """Run a bare ``try/finally`` Python process, send it ``sig``, report whether ``finally`` ran."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_PROBE],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # blocks until the probe is inside its try block
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    output = first + rest
    return SignalOutcome(signal.Signals(sig).name, proc.returncode, "cleanup ran" in output, output)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)

