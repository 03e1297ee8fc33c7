"""The lab's billing handler: validate, simulate the work, fail now and then, describe the charge.

The worker calls it in three steps around the dedupe strategy: :meth:`BillingHandler.parse`
(a bad message raises :class:`~solutions.messages.PermanentError` and goes to the DLQ),
:meth:`BillingHandler.process` (the work: ``delay_ms`` plus a uniform random extra up to
``jitter_ms``; every ``fail_every``-th attempt raises a transient error) and
:meth:`BillingHandler.charge` (the row the strategy writes to the ledger).

Subclass it, or pass another object with the same three methods, to run your own logic in
the same worker (see :class:`Handler`). A handler whose work takes no time may also offer
``instant = True`` and a synchronous ``process_now(event)``: the worker then handles each
read batch as one unit (one task, one dedupe pipeline, one transaction, one XACK).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Protocol

from solutions.ledger import Charge
from solutions.messages import Delivery, OrderEvent, TransientError, parse_order


class Handler(Protocol):
    """What the worker needs from a handler."""

    def parse(self, delivery: Delivery) -> OrderEvent: ...

    async def process(self, event: OrderEvent) -> None: ...

    def charge(self, event: OrderEvent, consumer: str) -> Charge: ...


class BillingHandler:
    """The billing handler of course module 3's lab."""

    def __init__(self, *, stream: str = "orders", delay_ms: int = 50, jitter_ms: int = 0, fail_every: int = 0):
        self.stream = stream
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        self.fail_every = fail_every
        self._attempts = itertools.count(1)

    def parse(self, delivery: Delivery) -> OrderEvent:
        """Validate the message (PermanentError with the reason if it can never succeed)."""
        return parse_order(self.stream, delivery)

    def work_s(self) -> float:
        """This attempt's simulated work: the delay plus a uniform extra up to the jitter."""
        extra_ms = random.uniform(0, self.jitter_ms) if self.jitter_ms else 0.0
        return (self.delay_ms + extra_ms) / 1000

    @property
    def instant(self) -> bool:
        """True when the work takes no time: the worker then handles a whole read batch at once."""
        # A subclass with its own process() must be called through it.
        return self.delay_ms == 0 and self.jitter_ms == 0 and type(self).process is BillingHandler.process

    def process_now(self, event: OrderEvent) -> None:
        """The work without waiting (all of it, for an :attr:`instant` handler): the failure injection."""
        attempt = next(self._attempts)
        if self.fail_every and attempt % self.fail_every == 0:
            raise TransientError(f"simulated failure: attempt {attempt} (every {self.fail_every}th fails)")

    async def process(self, event: OrderEvent) -> None:
        """The simulated work; every ``fail_every``-th attempt fails transiently (no ack, retried)."""
        seconds = self.work_s()
        if seconds > 0:  # with no delay the handler does not sleep at all
            await asyncio.sleep(seconds)
        self.process_now(event)

    def charge(self, event: OrderEvent, consumer: str) -> Charge:
        """The ledger row for this event."""
        return Charge(
            event_id=event.dedupe_key,
            order_id=event.order_id,
            amount=str(event.amount),
            msg_id=event.msg_id,
            consumer=consumer,
        )
