"""One phase of the lab: the cells of one mode, under load together, with the mode's fault.

1. create each cell's group (``XGROUP CREATE ... 0 MKSTREAM``), start its three workers and
   wait until all three have read (they appear in ``XINFO CONSUMERS``);
2. start the producers; at ``fault_at_s`` the fault: ``kill -9`` of the master (or
   ``SENTINEL FAILOVER``) for ``failover``, SIGTERM to ``billing-2`` of every cell for
   ``sigterm`` (restarted ``restart_after_s`` after it exited);
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
from typing import Any

import redis

from labs import launcher
from labs.lab3.cell import GROUP, Cell
from labs.lab3.probe import delivered_before, entries, group_state, master_client, pending_by_consumer, pending_ids
from labs.lab3.record import CellRecord, read_charges, read_logs, read_sends
from labs.lab3.sampler import Sampler
from labs.lab3.settings import WORKERS, Lab3Settings
from labs.launcher.topology import Topology

log = logging.getLogger(__name__)

VICTIM = "billing-2"
READY_TIMEOUT_S = 30.0
POLL_S = 0.25
FAILOVER_TIMEOUT_S = 30.0
Notify = Callable[[str, float], None]


class LabError(RuntimeError):
    """The lab could not run a phase (workers never started, the topology did not answer)."""


@dataclass
class PhaseResult:
    mode: str
    records: list[tuple[Cell, CellRecord]]
    durations_s: dict[str, float] = field(default_factory=dict)
    fault: dict[str, Any] = field(default_factory=dict)


class Phase:
    """Runs the cells of one mode; :meth:`run` returns their records."""

    def __init__(self, mode: str, cells: Sequence[Cell], s: Lab3Settings, notify: Notify | None = None) -> None:
        self.mode, self.cells, self.s = mode, list(cells), s
        self.notify = notify or (lambda text, fraction: None)
        first = self.cells[0]
        self.client = master_client(first.sentinels, first.master_name)
        self.fault: dict[str, Any] = {}
        self.fault_t: float | None = None
        self.promoted_t: float | None = None
        self.acked_not_done: dict[str, list[str]] = {}
        self._threads: list[threading.Thread] = []

    # -- steps ---------------------------------------------------------------------------

    def start_workers(self) -> None:
        """Create the groups, start the workers, and wait until they read (or the start timeout).

        A worker is ready once it shows in ``XINFO CONSUMERS``, or once as many clients as
        workers wait in ``XREADGROUP`` (Redis 7.0 creates a consumer that only blocks on ``>``
        at its first message). A worker that exits now stops the lab with the reason.
        """
        for cell in self.cells:
            with contextlib.suppress(redis.ResponseError):  # BUSYGROUP
                self.client.xgroup_create(cell.stream, GROUP, id="0", mkstream=True)
            cell.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        expected = len(WORKERS) * len(self.cells)
        while time.monotonic() < deadline:
            for cell in self.cells:
                dead = [f"{c} (exit code {p.poll()})" for c, p in cell.workers.items() if p.poll() is not None]
                if dead:
                    raise LabError(f"{cell.name}: {', '.join(dead)} exited at start; see {cell.home}")
            consumers = sum(min(len(WORKERS), len(self._consumers(c))) for c in self.cells)
            if consumers >= expected or self._reading_clients() >= expected:
                return
            time.sleep(POLL_S)
        log.warning("not every worker showed as reading within %.0f s; going on", READY_TIMEOUT_S)

    def _consumers(self, cell: Cell) -> set[str]:
        with contextlib.suppress(redis.RedisError):
            return {str(c["name"]) for c in self.client.xinfo_consumers(cell.stream, GROUP)}
        return set()

    def _reading_clients(self) -> int:
        with contextlib.suppress(redis.RedisError):
            return sum(1 for c in self.client.client_list() if c.get("cmd") == "xreadgroup")
        return 0

    def start_producers(self) -> None:
        """Start every cell's producer and wait until each has logged a send (they start slowly
        on a busy machine; the load counts from when all of them run)."""
        for cell in self.cells:
            cell.start_producer()
        deadline = time.monotonic() + READY_TIMEOUT_S
        for cell in self.cells:
            while not (cell.sent_log.exists() and cell.sent_log.stat().st_size > 0):
                if cell.producer is not None and cell.producer.poll() is not None:
                    raise LabError(f"{cell.name}: the producer exited with {cell.producer.poll()}; see {cell.home}")
                if time.monotonic() > deadline:
                    raise LabError(f"{cell.name}: the producer sent nothing in {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.05)

    def load(self, t0: float) -> float:
        """Run the producers for the mode's duration, with the fault; returns when they stopped."""
        produce_s = self.s.produce_s_for(self.mode)
        faulted = self.mode == "normal"
        while (elapsed := time.time() - t0) < produce_s:
            if not faulted and elapsed >= self.s.fault_at_s:
                self.inject()
                faulted = True
            self.notify(f"{self.mode}: load {elapsed:.0f}/{produce_s:.0f} s", elapsed / produce_s)
            time.sleep(POLL_S)
        for cell in self.cells:  # all at once: the cells stop together
            cell.signal_producer(signal.SIGINT)
        stopped = time.time()
        for cell in self.cells:
            cell.stop_producer()
        return stopped

    def inject(self) -> None:
        self.fault_t = time.time()
        target = self._failover if self.mode == "failover" else self._sigterm
        thread = threading.Thread(target=target, name=f"lab3-fault-{self.mode}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _failover(self) -> None:
        try:
            if self.s.failover == "hard":
                self._kill_master()
            else:
                result = launcher.failover(hard=False, timeout_s=FAILOVER_TIMEOUT_S)
                self.promoted_t = time.time()
                self.fault.update(kind="SENTINEL FAILOVER", old=result.old_master, new=result.new_master,
                                  promoted_after_s=result.elapsed_s)
        except Exception as exc:
            self.fault.update(kind=f"failover ({self.s.failover})", error=repr(exc))
            log.warning("failover failed: %r", exc)

    def _kill_master(self) -> None:
        """kill -9 of the master, as ``launcher.failover(hard=True)`` does, noting the moment of the kill.

        The old master is started again once every sentinel has switched; Sentinel then turns
        it into a replica of the new master (it waits some seconds before it does).
        """
        topo = Topology.from_env("sentinel")
        old = topo.master_addr()
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        self.fault_t = time.time()
        topo.server(old[1]).kill(signal.SIGKILL)
        new = topo.wait_new_master(old, deadline)
        self.promoted_t = time.time()
        self.fault.update(kind="kill -9", old=old, new=new, promoted_after_s=self.promoted_t - self.fault_t)
        topo.wait_switched(new, deadline)
        topo.start(topo.server(old[1]))
        topo.wait_ready(FAILOVER_TIMEOUT_S)
        self.fault["replica_back_after_s"] = time.time() - self.fault_t

    def _sigterm(self) -> None:
        self.fault.update(kind=f"SIGTERM to {VICTIM}")
        for cell in self.cells:
            cell.signal_worker(VICTIM, signal.SIGTERM)
        for cell in self.cells:
            cell.reap(VICTIM, "SIGTERM")
            self.acked_not_done[cell.name] = self._acked_not_done(cell)
        time.sleep(self.s.restart_after_s)
        for cell in self.cells:
            cell.start_worker(VICTIM)
        self.fault["restarted_after_s"] = time.time() - (self.fault_t or time.time())

    def _acked_not_done(self, cell: Cell) -> list[str]:
        """Events delivered and acked, yet neither charged nor dead-lettered, right after the exit.

        Read in this order: last delivered id, then XPENDING, then the ledger and the DLQ; an
        entry acked after the XPENDING read was charged before it was acked, so it shows.
        """
        try:
            state = group_state(self.client, cell.stream, GROUP)
            pending = set(pending_ids(self.client, cell.stream, GROUP))
            charged = {c.event_id for c in read_charges(cell.ledger)}
            dead = {f.get("event_id", "") for _, f in entries(self.client, cell.dlq)}
            last = state.last_delivered_id if state else "0-0"
            delivered = [(i, f.get("event_id", "")) for i, f in entries(self.client, cell.stream, last)]
        except redis.RedisError as exc:
            log.warning("acked-not-done snapshot of %s failed: %r", cell.name, exc)
            return []
        return [e for i, e in delivered if delivered_before(last, i) and i not in pending
                and e not in charged and e not in dead]

    def settle(self, produce_end: float) -> dict[str, float | None]:
        """Wait until pending = 0 and lag = 0 in every cell; returns when each got there."""
        for thread in self._threads:
            thread.join(timeout=60)
        settled: dict[str, float | None] = {c.name: None for c in self.cells}
        deadline = time.monotonic() + self.s.settle_timeout_s
        while time.monotonic() < deadline and None in settled.values():
            for cell in self.cells:
                if settled[cell.name] is None and self._idle(cell):
                    settled[cell.name] = time.time()
            waiting = sum(v is None for v in settled.values())
            self.notify(f"{self.mode}: drain, {waiting} cell(s) with pending or lag", 1.0)
            time.sleep(POLL_S)
        return settled

    def _idle(self, cell: Cell) -> bool:
        with contextlib.suppress(redis.RedisError):
            state = group_state(self.client, cell.stream, GROUP)
            return state is not None and state.pending == 0 and state.lag == 0
        return False

    def collect(self, cell: Cell, sampler: Sampler, t0: float, produce_end: float, settled: float | None) -> CellRecord:
        state = group_state(self.client, cell.stream, GROUP)
        stream_events = {f.get("event_id", "") for _, f in entries(self.client, cell.stream)}
        return CellRecord(
            sends=read_sends(cell.sent_log),
            charges=read_charges(cell.ledger),
            dlq_events=[f.get("event_id", "") for _, f in entries(self.client, cell.dlq)],
            stream_events=stream_events,
            pending_end=state.pending if state else -1,
            pending_end_by_consumer=pending_by_consumer(self.client, cell.stream, GROUP),
            lag_end=state.lag if state and state.lag is not None else -1,
            samples=sampler.samples[cell.name],
            logs=read_logs([cell.worker_log(c) for c in WORKERS]),
            exits=[e.__dict__ for e in cell.exits],
            t0=t0,
            produce_end=produce_end,
            fault_t=self.fault_t,
            promoted_t=self.promoted_t,
            settled_t=settled,
            acked_not_done=self.acked_not_done.get(cell.name),
        )

    # -- the whole phase -----------------------------------------------------------------

    def run(self) -> PhaseResult:
        marks = {"start": time.monotonic()}
        try:
            self.start_workers()
            marks["workers ready"] = time.monotonic()
            sentinels, name = self.cells[0].sentinels, self.cells[0].master_name
            with Sampler(self.cells, sentinels, name, self.s.sample_interval_s) as sampler:
                self.start_producers()
                t0 = time.time()
                produce_end = self.load(t0)
                marks["load"] = time.monotonic()
                settled = self.settle(produce_end)
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
        return PhaseResult(self.mode, records, _durations(marks), dict(self.fault))


def _durations(marks: dict[str, float]) -> dict[str, float]:
    names = list(marks)
    return {b: round(marks[b] - marks[a], 2) for a, b in itertools.pairwise(names)}
