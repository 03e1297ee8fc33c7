"""The faults of the lab's modes, each run on a thread of its own while the load goes on.

- ``failover``: the deployment's failover (``kill -9`` of the master, or ``SENTINEL FAILOVER``);
- ``sigterm``: SIGTERM to ``billing-2`` of every cell, wait for it to exit (it must drain and
  exit 0), check that nothing was acked without its charge, start it again;
- ``crash``: ``kill -9`` of ``billing-2`` of every cell *between its charge and its XACK*. How
  the lab catches that moment without the worker's help, in any language:

  1. ``CLIENT PAUSE <ms> WRITE``: Redis holds every write (XACK, XREADGROUP, XADD), so the work
     the worker already has in hand finishes, is charged in the ledger, and its XACK waits in
     the server;
  2. SIGSTOP the worker; read the ledger's charges by that consumer and its entries in
     ``XPENDING``; if some message is both charged and still pending, SIGKILL, else SIGCONT
     and look again a moment later, then in the next pause (up to ``crash_tries`` pauses);
  3. ``CLIENT UNPAUSE``: Redis drops the dead client's waiting XACK, so those messages stay
     pending and the other workers reclaim them after min idle: a duplicate delivery of work
     that was done. Read after the kill, Redis and the ledger say how many.

  Without the pause the moment is a few hundred microseconds wide: SIGSTOP at random moments
  caught the reference worker holding such a message in 2 of 300 tries (the compact
  reference in 0 of 300). One look 150 ms into a pause caught them in 15 and 13 of 20 pauses;
  with a first pause that only gathers a backlog, every cell of a full run was caught in the
  second pause.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence

import redis

from labs.lab3.cell import GROUP, Cell
from labs.lab3.deployment import Deployment, Fault
from labs.lab3.record import CrashRecord, read_charges
from labs.lab3.settings import VICTIM, Lab3Settings
from labs.polling import every

log = logging.getLogger(__name__)

FIRST_LOOK_S = 0.15  # into a pause: the work in hand (50 ms) is done and charged by then
LOOK_EVERY_S = 0.1
AFTER_KILL_S = 0.3  # the server has seen the dead connection close by then
BURST_S = 0.1  # between two pauses: the workers read the burst of held sends and start on it


def fail_over(site: Deployment, s: Lab3Settings) -> Fault:
    try:
        return site.fail_over(hard=s.failover == "hard")
    except Exception as exc:  # the phase goes on; the failover check says it did not happen
        log.warning("failover failed: %r", exc)
        return {"kind": f"failover ({s.failover})", "error": repr(exc)}


def sigterm(cells: Sequence[Cell], s: Lab3Settings, client: redis.Redis) -> tuple[Fault, dict[str, list[str]]]:
    """SIGTERM to the victim of every cell; returns the fault and, per cell, the events acked but not done."""
    fault_t = time.time()
    for cell in cells:
        cell.signal_worker(VICTIM, signal.SIGTERM)
    acked_not_done: dict[str, list[str]] = {}
    for cell in cells:
        cell.reap(VICTIM, "SIGTERM")
        acked_not_done[cell.name] = _acked_not_done(cell, client)
    time.sleep(s.restart_after_s)
    for cell in cells:
        cell.start_worker(VICTIM)
    return {"kind": f"SIGTERM to {VICTIM}", "fault_t": fault_t,
            "restarted_after_s": time.time() - fault_t}, acked_not_done


def _acked_not_done(cell: Cell, client: redis.Redis) -> list[str]:
    """Events delivered and acked, yet neither charged nor dead-lettered, right after the exit.

    Read in this order: last delivered id, then XPENDING, then the ledger and the DLQ; an
    entry acked after the XPENDING read was charged before it was acked, so it shows.
    """
    streams = cell.site.cell_streams(client, cell.stream)
    try:
        delivered, pending = streams.delivered(GROUP)
        charged = {c.event_id for c in read_charges(cell.ledger)}
        dead = {f.get("event_id", "") for _, f in streams.dlq_entries()}
    except redis.RedisError as exc:
        log.warning("acked-not-done snapshot of %s failed: %r", cell.name, exc)
        return []
    return [e for i, e in delivered if i not in pending and e not in charged and e not in dead]


def crash(cells: Sequence[Cell], s: Lab3Settings, site: Deployment,
          client: redis.Redis) -> tuple[Fault, dict[str, CrashRecord]]:
    """kill -9 of the victim of every cell while it holds charged, unacknowledged messages (see above)."""
    return Crash(cells, s, site, client).run()


class Crash:
    """The crash mode's fault: write pauses, a look at each stopped victim, a kill where it holds a charge."""

    def __init__(self, cells: Sequence[Cell], s: Lab3Settings, site: Deployment, client: redis.Redis) -> None:
        self.s, self.site, self.client = s, site, client
        self.records = {c.name: CrashRecord(VICTIM) for c in cells}
        self.cells = list(cells)
        self.left = [c for c in cells if c.running(VICTIM)]

    def run(self) -> tuple[Fault, dict[str, CrashRecord]]:
        fault_t = time.time()
        pauses = 0
        while self.left and pauses < self.s.crash_tries:
            pauses += 1
            before = list(self.left)
            window_s = self.s.crash_pause_ms * 0.8 / 1000
            with self.site.pause_writes(self.client, self.s.crash_pause_ms):
                if pauses == 1:  # the first pause only gathers a backlog: the burst after it fills the hands
                    time.sleep(window_s)
                else:
                    self._look(window_s, pauses)
            self._after_kills([c for c in before if c not in self.left])
            time.sleep(BURST_S)  # the producers' held sends arrive at once and the workers take them in
        never = list(self.left)
        for cell in never:  # never caught: kill it anyway, and say so
            self._kill(cell, [])
        self._after_kills(never)
        records = self.records.values()
        fault: Fault = {"kind": f"kill -9 of {VICTIM} between its charge and its XACK", "fault_t": fault_t,
                 "pauses": pauses, "caught": sum(r.caught for r in records), "cells": len(self.cells),
                 "held_after_kill": sum(len(r.held_after_kill) for r in records)}
        return fault, self.records

    def _look(self, window_s: float, pause: int) -> None:
        """SIGSTOP each victim in turn, look, SIGKILL it if it holds a charged message, else SIGCONT."""
        time.sleep(FIRST_LOOK_S)
        for _ in every(LOOK_EVERY_S, window_s - FIRST_LOOK_S):
            if not self.left:
                break
            for cell in list(self.left):
                self.records[cell.name].tries = pause
                proc = cell.workers[VICTIM]
                proc.send_signal(signal.SIGSTOP)
                held: list[str] = []
                try:
                    held = self._held(cell)
                finally:  # never leave a worker stopped, whatever the look raised
                    if held:
                        self._kill(cell, held)
                    else:
                        proc.send_signal(signal.SIGCONT)

    def _held(self, cell: Cell) -> list[str]:
        """Messages the victim charged that are still pending for it (charged, not acked)."""
        streams = self.site.cell_streams(self.client, cell.stream)
        try:
            pending = {e.msg_id for e in streams.pel(GROUP, VICTIM)}
        except redis.RedisError:
            return []
        return sorted(pending & streams.charged_ids(cell.ledger, VICTIM)) if pending else []

    def _kill(self, cell: Cell, held: list[str]) -> None:
        rec = self.records[cell.name]
        cell.workers[VICTIM].send_signal(signal.SIGKILL)
        rec.caught, rec.held_at_stop, rec.killed_t = bool(held), held, time.time()
        cell.reap(VICTIM, "SIGKILL (crash mode)", timeout_s=10)
        self.left.remove(cell)

    def _after_kills(self, killed: list[Cell]) -> None:
        """Redis and the ledger read just after the kills, before the others reclaim anything (min idle)."""
        if not killed:
            return
        time.sleep(AFTER_KILL_S)
        for cell in killed:
            rec = self.records[cell.name]
            streams = self.site.cell_streams(self.client, cell.stream)
            try:
                pending = {e.msg_id for e in streams.pel(GROUP, VICTIM)}
            except redis.RedisError as exc:
                log.warning("after the kill, XPENDING of %s failed: %r", cell.name, exc)
                continue
            rec.pending_after_kill = len(pending)
            rec.held_after_kill = sorted(pending & streams.charged_ids(cell.ledger, VICTIM))
