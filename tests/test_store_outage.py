"""A business-store outage is a pause: real faults of a real SQLite ledger, every dedupe strategy.

One ``billing-worker`` process per strategy (``none``, ``redis``, ``redis-2phase``, ``sqlite``),
each with its own stream and its own ledger on a small ext4 filesystem the test mounts
(:mod:`store_faults`). For each kind of fault (locked, disk full, I/O error, read-only, a
broken connection) the test charges a few events, breaks the store under all four workers
at once, sends events while it is broken, keeps it broken for longer than
``max_attempts x min_idle`` (so that attempts spent on the outage would dead-letter events),
repairs it, and counts from records the workers do not write: the ledger (charges, their
times) and Redis (the DLQ, the PEL); from the worker's own log only how many lines it wrote.

Nothing lost, nothing charged twice, nothing dead-lettered, and a handful of log lines for
the whole outage (``down``, ``back``), not one per message. The figures of each run are
printed (``pytest -s``): outage, recovery to the first charge, log lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from billing_support import (
    FAST,
    ROOT,
    hold_ledger_lock,
    ledger_rows,
    pending_ids,
    produce,
    release_ledger_lock,
    wait_until,
    worker_args,
)
from require_support import skip_area
from store_faults import Disk, disk_or_skip_reason, limit_file_size

from solutions.store_breaker import SUMMARY_EVERY_S

pytestmark = pytest.mark.slow

STRATEGIES = ("none", "redis", "redis-2phase", "sqlite")
KINDS = ("locked", "disk-full", "io-error", "read-only", "bad-connection")
MAX_ATTEMPTS, MIN_IDLE_MS = 3, 300
# The fault lasts at least this: longer than MAX_ATTEMPTS x MIN_IDLE_MS. Set STORE_OUTAGE_HOLD_S
# to hold it longer (issue 20's ten minutes: STORE_OUTAGE_HOLD_S=600 pytest -s -k disk-full ...).
HOLD_S = float(os.environ.get("STORE_OUTAGE_HOLD_S", "2.0"))
BEFORE, DURING = 5, 20  # events per stream before the fault (charged) and while it lasts
# For the whole outage: down and back, a summary every SUMMARY_EVERY_S while it lasts, the
# worker's periodic metrics line, and room for a Redis hiccup on a loaded machine (a reader
# streak is two lines); a line per message would be DURING lines at least.
MAX_LOG_LINES = 8 + int(HOLD_S // SUMMARY_EVERY_S) + int(HOLD_S // FAST["metrics_interval_s"])
# An instant handler takes a read batch as one run; a waiting one makes a run per order id,
# and many runs fail on the store at once: both must log the outage once.
HANDLER_DELAY_MS = {"none": 0, "redis": 1, "redis-2phase": 0, "sqlite": 1}


@dataclass
class WorkerProcess:
    """A ``billing-worker`` whose stderr (its log) the test reads through a pipe: a file would
    be refused by the I/O-error fault (``RLIMIT_FSIZE``) like the ledger."""

    strategy: str
    ledger: Path
    stream: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True, name=f"log-{self.strategy}").start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def logged(self, since: int, text: str) -> list[str]:
        return [line for line in self.lines[since:] if text in line]


@dataclass
class Outcome:
    """One strategy through one fault, counted from the ledger and Redis (log lines from the log)."""

    lost: list[str]
    duplicated: dict[str, int]
    dead_lettered: int
    outage_s: float
    first_charge_s: float
    log_lines: list[str]

    def line(self) -> str:
        return (f"lost={len(self.lost)} duplicated={len(self.duplicated)} dead_lettered={self.dead_lettered} "
                f"outage={self.outage_s:.2f}s recovery_to_first_charge={self.first_charge_s:.2f}s "
                f"log_lines={len(self.log_lines)}")


class Rig:
    """Four workers on one mounted filesystem; :meth:`outcome` runs a kind of fault once for all four."""

    def __init__(self, redis_url: str, root: Path, prefix: str) -> None:
        self.client = redis.Redis.from_url(redis_url, decode_responses=True)
        self.disk = Disk(root)
        self.sent = dict.fromkeys(STRATEGIES, 0)
        self.workers: dict[str, WorkerProcess] = {}
        self.outcomes: dict[str, dict[str, Outcome]] = {}
        self.failures: dict[str, AssertionError] = {}
        for strategy in STRATEGIES:
            ledger, stream = self.disk.mountpoint / f"{strategy}.sqlite3", f"{prefix}{strategy}"
            args = worker_args(redis_url, stream, ledger, f"outage-{strategy}", dedupe=strategy,
                               min_idle_ms=MIN_IDLE_MS, claim_interval_ms=100, max_attempts=MAX_ATTEMPTS,
                               ledger_busy_timeout_ms=200, block_ms=100, handler_delay_ms=HANDLER_DELAY_MS[strategy])
            proc = subprocess.Popen([sys.executable, "-m", "solutions.billing", *args], cwd=ROOT, text=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.workers[strategy] = WorkerProcess(strategy, ledger, stream, proc)
        for worker in self.workers.values():
            wait_until(lambda w=worker: w.logged(0, " reading ") or w.proc.poll() is not None, 30, "the workers")
            assert worker.proc.poll() is None, "\n".join(worker.lines)

    def close(self) -> None:
        for worker in self.workers.values():
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        for worker in self.workers.values():
            try:
                worker.proc.wait(20)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait(5)
        self.disk.close()
        self.client.close()

    def produce(self, n: int) -> None:
        for strategy, worker in self.workers.items():
            produce(self.client, worker.stream, n, start=self.sent[strategy])
            self.sent[strategy] += n

    def charges(self, worker: WorkerProcess) -> list[tuple[str, float]]:
        return [(str(e), float(t)) for e, t in ledger_rows(worker.ledger, "SELECT event_id, charged_at FROM charges")]

    def settled(self) -> bool:
        """Every event sent is charged or dead-lettered, and nothing is pending, for every worker."""
        for strategy, worker in self.workers.items():
            done = {e for e, _ in self.charges(worker)} | set(self.dead_letters(worker))
            if len(done) < self.sent[strategy] or pending_ids(self.client, worker.stream, "billing"):
                return False
        return True

    def dead_letters(self, worker: WorkerProcess) -> list[str]:
        return [fields["event_id"] for _, fields in self.client.xrange(f"{worker.stream}:dlq")]

    # -- the faults -------------------------------------------------------------------------

    def fault(self, kind: str) -> tuple[Callable[[], None], Callable[[], None]]:
        """``(break it, repair it)`` for a kind of fault."""
        ledgers = [w.ledger for w in self.workers.values()]
        pids = [w.proc.pid for w in self.workers.values()]
        holder: list[subprocess.Popen[str]] = []
        if kind == "locked":
            return (lambda: holder.append(hold_ledger_lock(*ledgers))), (lambda: release_ledger_lock(holder[0]))
        if kind == "disk-full":
            return self.disk.fill, self.disk.unfill
        if kind == "io-error":
            return (lambda: [limit_file_size(pid, 1) for pid in pids] and None), \
                   (lambda: [limit_file_size(pid, None) for pid in pids] and None)

        def read_only() -> None:
            self.disk.sync(*ledgers, *(Path(f"{ledger}-wal") for ledger in ledgers))
            self.disk.go_read_only()
            if kind == "bad-connection":  # repaired before anyone writes: only the connections are broken
                self.disk.mount_again()

        return read_only, (self.disk.mount_again if kind == "read-only" else lambda: None)

    def outcome(self, kind: str) -> dict[str, Outcome]:
        """The outcomes of ``kind`` for every strategy (run once; a failed run fails each strategy's test)."""
        if kind not in self.outcomes and kind not in self.failures:
            try:
                self.outcomes[kind] = self._run(kind)
            except AssertionError as exc:
                self.failures[kind] = exc
        if kind in self.failures:
            raise self.failures[kind]
        return self.outcomes[kind]

    def _wait(self, predicate: Callable[[], object], timeout_s: float, what: str) -> None:
        """:func:`wait_until`, and on a timeout the end of each worker's log and what is unsettled."""
        try:
            wait_until(predicate, timeout_s, what)
        except AssertionError as exc:
            tails = []
            for strategy, worker in self.workers.items():
                charged = len({e for e, _ in self.charges(worker)})
                pending = len(pending_ids(self.client, worker.stream, "billing"))
                tails.append(f"--- {strategy}: sent {self.sent[strategy]}, charged {charged}, pending {pending}, "
                             f"exit {worker.proc.poll()}\n" + "\n".join(worker.lines[-8:]))
            raise AssertionError(f"{exc}\n" + "\n".join(tails)) from None

    def _run(self, kind: str) -> dict[str, Outcome]:
        self.produce(BEFORE)
        self._wait(self.settled, 20, "the events before the fault")
        since = {s: len(w.lines) for s, w in self.workers.items()}
        brake, repair = self.fault(kind)
        brake()
        broken_at = time.monotonic()
        for _ in range(4):  # events keep arriving while the store is broken
            self.produce(DURING // 4)
            time.sleep(0.1)
        for worker in self.workers.values():
            self._wait(lambda w=worker: w.logged(since[w.strategy], "business store down"), 20,
                       f"{worker.strategy}: the store seen down")
        if kind != "bad-connection":
            time.sleep(max(0.0, HOLD_S - (time.monotonic() - broken_at)))
        repaired_at = time.time()  # when the repair starts: the store may answer from here on
        repair()
        self._wait(self.settled, 30, "every event charged after the repair")
        for worker in self.workers.values():
            self._wait(lambda w=worker: w.logged(since[w.strategy], "business store back"), 10, "the back line")
        return {s: self._measure(w, since[s], repaired_at) for s, w in self.workers.items()}

    def _measure(self, worker: WorkerProcess, since: int, repaired_at: float) -> Outcome:
        charges = self.charges(worker)
        counts: dict[str, int] = {}
        for event_id, _ in charges:
            counts[event_id] = counts.get(event_id, 0) + 1
        dead = self.dead_letters(worker)
        sent = {f"ev-{i}" for i in range(self.sent[worker.strategy])}
        back = worker.logged(since, "business store back")
        outage = re.search(r"back after ([\d.]+)s", back[0]) if back else None
        after = [t for _, t in charges if t >= repaired_at]
        return Outcome(
            lost=sorted(sent - set(counts) - set(dead)),
            duplicated={e: n for e, n in counts.items() if n > 1},
            dead_lettered=len(dead),
            outage_s=float(outage.group(1)) if outage else -1.0,
            first_charge_s=min(after) - repaired_at if after else -1.0,
            log_lines=worker.lines[since:],
        )


@pytest.fixture(scope="module")
def rig(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    reason = disk_or_skip_reason()
    if reason:
        skip_area("store-outage", f"store outage tests: {reason}")
    root = tmp_path_factory.mktemp("store-outage")
    try:
        made = Rig(redis_url, root, f"test:store-outage:{root.name}:")
    except subprocess.CalledProcessError as exc:  # mkfs, losetup or mount refused here
        skip_area("store-outage", f"store outage tests: cannot mount a test filesystem: {exc.stderr.strip()}")
    try:
        yield made
    finally:
        made.close()
        with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
            keys = list(client.scan_iter(match=f"test:store-outage:{root.name}:*"))
            if keys:
                client.delete(*keys)


@pytest.mark.timeout(300 + HOLD_S)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_store_outage_loses_nothing_charges_nothing_twice_and_dead_letters_nothing(
    kind: str, strategy: str, rig: Rig
) -> None:
    if kind in ("read-only", "bad-connection") and not rig.disk.can_go_read_only():
        pytest.skip(f"{kind}: this kernel has no ext4 trigger_fs_error to make the filesystem read-only")
    result = rig.outcome(kind)[strategy]
    print(f"\n{kind:15} {strategy:13} {result.line()}")
    log = "\n".join(result.log_lines)
    assert not result.lost, f"{len(result.lost)} events lost: {result.lost}"
    assert not result.duplicated, f"charged twice: {result.duplicated}"
    assert result.dead_lettered == 0, "good events dead-lettered for a fault of the store"
    assert len(result.log_lines) <= MAX_LOG_LINES, f"{len(result.log_lines)} log lines for one outage:\n{log}"
    assert sum("business store down" in line for line in result.log_lines) == 1, log
    assert "cannot rollback" not in log and "Traceback" not in log, log
