"""The one handler and SQLite ledger every broker's consumer runs (lab 3's billing handler).

A delivery is charged through :class:`solutions.ledger.Ledger` with ``once=True``: the charge and
its ``applied_events`` row commit in one transaction, so a redelivered event is *absorbed*
(counted, not charged again). Only then is the delivery acked. A failing handling (``fail_every``,
or a poison event whose amount is ``poison``) is retried by the broker until ``max_attempts``, then
dead-lettered; an undecodable body goes to the dead letters at once. Where the broker dead-letters
by itself (``broker_dead_letters``: RabbitMQ's ``x-delivery-limit``), a failing delivery is only
ever requeued: the move to the dead letters is the broker's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from labs.compare.contract import Broker, Delivery
from solutions.ledger import Charge, Ledger

log = logging.getLogger(__name__)
POISON_AMOUNT = "poison"


@dataclass
class Tally:
    """What one consumer saw (the ledger is the record; this is for the report's detail)."""

    charged: int = 0
    absorbed: int = 0  # deliveries of an event already in applied_events
    failed: int = 0
    dead_lettered: int = 0
    ack_errors: int = 0
    attempts: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    charged_at: list[float] = field(default_factory=list)
    absorbed_at: list[float] = field(default_factory=list)


class Charger:
    """Charge each delivery once, ack after the commit; fail, retry and dead-letter as the contract says."""

    def __init__(self, ledger: Path, consumer: str, *, max_attempts: int, fail_every: int = 0,
                 delay_ms: int = 0, crash_after_charges: int = 0, broker_dead_letters: bool = False) -> None:
        self.ledger = Ledger(ledger).open()
        self.consumer = consumer
        self.max_attempts = max_attempts
        self.fail_every = fail_every
        self.delay_s = delay_ms / 1000
        self.crash_after_charges = crash_after_charges  # kill -9 of itself after this charge, before its ack
        self.broker_dead_letters = broker_dead_letters
        self.tally = Tally()
        self._handled = 0

    async def handle(self, d: Delivery) -> None:
        """One delivery: charge (once) then ack, or retry / dead-letter; broker errors are logged, not raised."""
        try:
            await self._handle(d)
        except Exception as exc:  # an ack on a connection that just died: the broker redelivers
            self.tally.ack_errors += 1
            log.info("%s: %s on %s", self.consumer, type(exc).__name__, d.msg_id)

    async def _handle(self, d: Delivery) -> None:
        if d.event is None:
            self.tally.dead_lettered += 1
            await d.dead_letter("undecodable body")
            return
        self.tally.attempts[d.event.event_id] += 1
        self._handled += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        failing = d.event.amount == POISON_AMOUNT or (self.fail_every and self._handled % self.fail_every == 0)
        if failing:
            self.tally.failed += 1
            if d.attempt >= self.max_attempts and not self.broker_dead_letters:
                self.tally.dead_lettered += 1
                await d.dead_letter(f"failed {d.attempt} times")
            else:
                await d.retry()
            return
        event = d.event
        charge = Charge(event.event_id, event.order_id, event.amount, d.msg_id, self.consumer)
        (applied,) = await asyncio.to_thread(self.ledger.write, [charge], once=True)
        now = time.time()
        if applied:
            self.tally.charged += 1
            self.tally.charged_at.append(now)
            if event.produced_at_ms:
                self.tally.latencies_ms.append(now * 1000 - event.produced_at_ms)
            if self.crash_after_charges and self.tally.charged >= self.crash_after_charges:
                log.warning("%s: kill -9 of myself after charging %s, before its ack", self.consumer, event.event_id)
                os.kill(os.getpid(), signal.SIGKILL)
        else:
            self.tally.absorbed += 1
            self.tally.absorbed_at.append(now)
        await d.ack()

    def close(self) -> None:
        self.ledger.close()


async def consume(broker: Broker, charger: Charger, stop: asyncio.Event) -> Tally:
    """Run one consumer until ``stop`` is set."""
    async for delivery in broker.deliveries(charger.consumer, stop):
        await charger.handle(delivery)
    return charger.tally
