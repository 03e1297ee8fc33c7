"""One phase of the lab: the cells of one mode, under load together, with the mode's fault.

1. create each cell's group (``XGROUP CREATE ... 0 MKSTREAM``), start its workers and wait
   until all of them read (they appear in ``XINFO CONSUMERS``);
2. start the producers; at ``fault_at_s`` the mode's fault (:mod:`labs.lab3.faults`): the
   failover, SIGTERM to ``billing-2`` (restarted ``restart_after_s`` after it exited), or
   ``kill -9`` of ``billing-2`` between a charge and its XACK (not restarted: the others take
   its messages over);
3. stop the producers, wait until pending = 0 and lag = 0 in every cell, stop the workers
   with SIGTERM, and collect each cell's records.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from labs.lab3 import faults
from labs.lab3.cell import GROUP, Cell
from labs.lab3.deployment import Deployment, Fault
from labs.lab3.record import CellRecord, CrashRecord, entries_by_event, read_charges, read_sends
from labs.lab3.sampler import Sampler
from labs.lab3.settings import Lab3Settings
from labs.lab3.streams import CellStreams
from labs.polling import every, poll, wait_until
from solutions.shards import slot_of

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 30.0
POLL_S = 0.25
RECOVERY_LOAD_S = 5.0  # of load after a failover's topology is whole again (see Scenario.load)
FAULT_OVERRUN_S = 60.0  # the most a failover may stretch the load past its duration (two failover timeouts)
TAIL_LINES = 5  # of a worker that died at start, shown in the FAIL line
Notify = Callable[[str, float], None]



def dead_at_start(cell: Cell, lines: int = TAIL_LINES) -> list[str]:
    """``billing-1 exited at start (exit code 1): <its last output lines>`` for each worker of ``cell`` that died."""
    return [
        f"{consumer} exited at start (exit code {proc.poll()}): {log_tail(cell.worker_log(consumer), lines)}"
        for consumer, proc in cell.workers.items()
        if proc.poll() is not None
    ]


def log_tail(path: Path, lines: int = TAIL_LINES, max_chars: int = 400) -> str:
    """The last ``lines`` non-empty lines of a worker's output (stdout and stderr), joined by " | "."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "no output"
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    joined = " | ".join(tail) or "no output"
    return joined if len(joined) <= max_chars else "..." + joined[-max_chars:]

class LabError(RuntimeError):
    """The lab could not run a phase (workers never started, the topology did not answer)."""


@dataclass
class PhaseResult:
    mode: str
    records: list[tuple[Cell, CellRecord]]
    durations_s: dict[str, float] = field(default_factory=dict)
    fault: Fault = field(default_factory=lambda: Fault())


class Phase:
    """Runs the cells of one mode; :meth:`run` returns their records."""

    def __init__(self, mode: str, cells: Sequence[Cell], s: Lab3Settings, site: Deployment,
                 notify: Notify | None = None) -> None:
        self.mode, self.cells, self.s, self.site = mode, list(cells), s, site
        self.notify = notify or (lambda text, fraction: None)
        self.client = site.client()
        self.fault: Fault = {}
        self.acked_not_done: dict[str, list[str]] = {}
        self.crashes: dict[str, CrashRecord] = {}
        self._threads: list[threading.Thread] = []

    # -- steps ---------------------------------------------------------------------------

    def streams(self, cell: Cell) -> CellStreams:
        """The keys of the cell's stream (one, or its shards on a cluster), read through the phase's client."""
        return self.site.cell_streams(self.client, cell.stream)

    def create_group(self, cell: Cell) -> None:
        """``XGROUP CREATE <stream> billing 0 MKSTREAM`` (on each shard); BUSYGROUP (it exists) is fine."""
        try:
            self.streams(cell).create_group(GROUP)
        except redis.ResponseError as exc:
            raise LabError(f"{cell.name}: XGROUP CREATE failed: {exc}") from exc

    def start_workers(self) -> None:
        """Create the groups, start the workers, and wait until they read (or the start timeout).

        A worker is ready once it shows in ``XINFO CONSUMERS``, or once as many clients as
        workers wait in ``XREADGROUP`` (Redis 7.0 creates a consumer that only blocks on ``>``
        at its first message). A worker that exits now stops the lab with the reason.
        """
        for cell in self.cells:
            self.create_group(cell)
            cell.start()
        per_cell = self.s.workers
        expected = per_cell * len(self.cells)

        def reading() -> bool:
            for cell in self.cells:
                if dead := dead_at_start(cell):
                    raise LabError(f"{cell.name}: {'; '.join(dead)}; see {cell.home}")
            consumers = sum(min(per_cell, len(self._consumers(c))) for c in self.cells)
            return consumers >= expected or self._reading_clients() >= expected

        if not poll(reading, READY_TIMEOUT_S, POLL_S):
            log.warning("not every worker showed as reading within %.0f s; going on", READY_TIMEOUT_S)

    def _consumers(self, cell: Cell) -> set[str]:
        return self.streams(cell).consumers(GROUP)

    def _reading_clients(self) -> int:
        return self.site.reading_clients(self.client)

    def start_producers(self) -> None:
        """Start every cell's producer and wait until each has logged a send (they start slowly
        on a busy machine; the load counts from when all of them run)."""
        for cell in self.cells:
            cell.start_producer()

        def sent(cell: Cell) -> bool:
            if cell.sent_log.exists() and cell.sent_log.stat().st_size > 0:
                return True
            if cell.producer is not None and cell.producer.poll() is not None:
                raise LabError(f"{cell.name}: the producer exited with {cell.producer.poll()}; see {cell.home}")
            return False

        def all_sent() -> bool:
            return all(sent(cell) for cell in self.cells)

        wait_until(all_sent, READY_TIMEOUT_S, lambda: "a send from every producer (none from "
                   f"{[c.name for c in self.cells if not sent(c)]})", 0.05, error=LabError)

    def load(self, t0: float) -> float:
        """Run the producers for the mode's duration, with the fault; returns when they stopped.

        A failover's load goes on, past the duration if need be, until the topology is whole again (the
        old master back as a replica) and ``RECOVERY_LOAD_S`` more: before that a producer that waits for
        a replica (``+wait``) has nothing to confirm, and what it sends after is what shows it resumed.
        A loaded CI machine once brought the old master back after the load had ended."""
        produce_s = self.s.produce_s_for(self.mode)
        faulted = self.mode == "normal"
        for _ in every(POLL_S, produce_s + FAULT_OVERRUN_S - (time.time() - t0)):
            elapsed = time.time() - t0
            if not faulted and elapsed >= self.s.fault_at_s:
                self.inject()
                faulted = True
            if elapsed >= produce_s and self._fault_whole(time.time()):
                break
            self.notify(f"{self.mode}: load {elapsed:.0f}/{produce_s:.0f} s", min(1.0, elapsed / produce_s))
        for cell in self.cells:  # all at once: the cells stop together
            cell.signal_producer(signal.SIGINT)
        stopped = time.time()
        for cell in self.cells:
            cell.stop_producer()
        return stopped

    def _fault_whole(self, now: float) -> bool:
        """True when the load may end: not a failover, or its topology whole again ``RECOVERY_LOAD_S`` ago."""
        if self.mode != "failover":
            return True
        back = self.fault.get("replica_back_after_s")
        if back is None:
            return not any(t.is_alive() for t in self._threads)  # the fault thread failed: nothing to wait for
        return now >= float(self.fault["fault_t"]) + float(back) + RECOVERY_LOAD_S

    def _replica_back_t(self) -> float | None:
        back = self.fault.get("replica_back_after_s")
        return None if back is None else self.fault["fault_t"] + back

    def inject(self) -> None:
        """The mode's fault, on a thread (the load and the progress go on meanwhile)."""
        self.fault = {"fault_t": time.time()}
        targets = {"failover": self._failover, "sigterm": self._sigterm, "crash": self._crash}
        thread = threading.Thread(target=targets[self.mode], name=f"lab3-fault-{self.mode}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _failover(self) -> None:
        self.fault.update(faults.fail_over(self.site, self.s))

    def _sigterm(self) -> None:
        fault, self.acked_not_done = faults.sigterm(self.cells, self.s, self.client)
        self.fault.update(fault)

    def _crash(self) -> None:
        client = self.site.client()  # a connection of its own: CLIENT PAUSE and the looks must not wait
        try:
            fault, self.crashes = faults.crash(self.cells, self.s, self.site, client)
            self.fault.update(fault)
        finally:
            client.close()

    def settle(self) -> dict[str, float | None]:
        """Wait until pending = 0 and lag = 0 in every cell; returns when each got there."""
        for thread in self._threads:
            thread.join(timeout=60)
        settled: dict[str, float | None] = {c.name: None for c in self.cells}

        def all_settled() -> bool:
            for cell in self.cells:
                if settled[cell.name] is None and self._idle(cell):
                    settled[cell.name] = time.time()
            waiting = sum(v is None for v in settled.values())
            self.notify(f"{self.mode}: drain, {waiting} cell(s) with pending or lag", 1.0)
            return waiting == 0

        poll(all_settled, self.s.settle_timeout_s, POLL_S)
        return settled

    def _idle(self, cell: Cell) -> bool:
        with contextlib.suppress(redis.RedisError):
            state = self.streams(cell).group_state(GROUP)
            return state is not None and state.pending == 0 and state.lag == 0
        return False

    def collect(self, cell: Cell, sampler: Sampler, t0: float, produce_end: float, settled: float | None) -> CellRecord:
        streams = self.streams(cell)
        state = streams.group_state(GROUP)
        return CellRecord(
            sends=read_sends(cell.sent_log),
            charges=streams.qualified_charges(read_charges(cell.ledger)),
            dlq_events=[f.get("event_id", "") for _, f in streams.dlq_entries()],
            stream_entries=entries_by_event(streams.entries()),
            pending_end=state.pending if state else -1,
            pending_end_by_consumer=streams.pending_by_consumer(GROUP),
            lag_end=state.lag if state and state.lag is not None else -1,
            samples=sampler.samples[cell.name],
            pels=sampler.pels[cell.name],
            exits=[e.__dict__ for e in cell.exits],
            t0=t0,
            produce_end=produce_end,
            fault_t=self.fault.get("fault_t"),
            promoted_t=self.fault.get("promoted_t"),
            replica_back_t=self._replica_back_t(),
            settled_t=settled,
            acked_not_done=self.acked_not_done.get(cell.name),
            crash=self.crashes.get(cell.name),
            stall_ms=self.s.stall_ms,
            shards=streams.names if streams.sharded else (),
            hit_shards=hit_shards(streams.names, self.fault.get("slots")) if streams.sharded else (),
        )

    # -- the whole phase -----------------------------------------------------------------

    def run(self) -> PhaseResult:
        marks = {"start": time.monotonic()}
        try:
            self.start_workers()
            marks["workers ready"] = time.monotonic()
            with Sampler(self.cells, self.site, self.s.sample_interval_s) as sampler:
                self.start_producers()
                t0 = time.time()
                produce_end = self.load(t0)
                marks["load"] = time.monotonic()
                settled = self.settle()
                marks["drain"] = time.monotonic()
            for cell in self.cells:
                cell.stop_workers()
            marks["workers stopped"] = time.monotonic()
            records = [(c, self.collect(c, sampler, t0, produce_end, settled[c.name])) for c in self.cells]
            marks["collect"] = time.monotonic()
        finally:
            for cell in self.cells:
                cell.kill_all()
            self.client.close()
        return PhaseResult(self.mode, records, _durations(marks), self.fault.copy())


def hit_shards(names: Sequence[str], slots: Sequence[Sequence[int]] | None) -> tuple[int, ...]:
    """The shards whose slot lies in the failed master's ranges (none without a failover)."""
    if not slots:
        return ()
    return tuple(i for i, name in enumerate(names) if any(lo <= slot_of(name) <= hi for lo, hi in slots))


def _durations(marks: dict[str, float]) -> dict[str, float]:
    names = list(marks)
    return {b: round(marks[b] - marks[a], 2) for a, b in itertools.pairwise(names)}
