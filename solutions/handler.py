"""The lab's billing handler: validate, simulate the work, fail now and then, describe the charge.

The worker calls it in three steps around the dedupe strategy: :meth:`BillingHandler.parse`
(a bad message raises :class:`~solutions.messages.PermanentError` and goes to the DLQ),
:meth:`BillingHandler.process` (the work: ``delay_ms`` plus a uniform random extra up to
``jitter_ms``; every ``fail_every``-th attempt raises a transient error) and
:meth:`BillingHandler.charge` (the row the strategy writes to the ledger).

Subclass it, or pass another object with the same members, to run your own logic in the
same worker (see :class:`Handler`). A handler says whether its work ever waits
(:attr:`Handler.instant`): an instant handler is awaited inline, one message after another,
and a read batch goes through the pipeline as one run; otherwise each lane key of a batch
gets a run of its own, so that waiting handlers overlap (up to ``--parallelism``).

The pipeline hands the work over a run at a time (:meth:`Handler.process_run`): a call per
message costs a coroutine, about as much as the rest of a message's way through the worker
without its parse and its charge. :meth:`BillingHandler.process_run` makes that call only
when there is work to await or a failure to simulate; otherwise a run is one call that does
nothing. :func:`process_each` is the message-by-message version, for handlers that have
nothing better to do with a run. The charges go the same way: :meth:`Handler.charges` makes a
run's ledger rows as one flat list (:class:`~solutions.charges.Charges`), and
:func:`charge_each` makes them from :meth:`Handler.charge`, an object per event.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Protocol

from solutions.charges import Charge, Charges
from solutions.messages import Delivery, OrderEvent, TransientError, parse_order
from solutions.settings import Settings


class Handler(Protocol):
    """What the worker needs from a handler."""

    @property
    def instant(self) -> bool:
        """True when :meth:`process` never waits (no I/O, no sleep): it is then awaited inline."""
        ...

    def parse(self, delivery: Delivery) -> OrderEvent:
        """Validate a delivery; raise :class:`~solutions.messages.PermanentError` if it can never succeed."""
        ...

    async def process(self, event: OrderEvent) -> None:
        """The work; an exception leaves the message pending (or dead-letters it at the last attempt)."""
        ...

    async def process_run(self, events: Sequence[OrderEvent], slot: Slot | None) -> Failures:
        """The work for a run of events, in order (each holding ``slot`` when there is one); returns
        the failures as ``(index in events, exception)``. :func:`process_each` does it per message."""
        ...

    def charge(self, event: OrderEvent, consumer: str) -> Charge:
        """The ledger row for a processed event."""
        ...

    def charges(self, events: Sequence[OrderEvent], consumer: str) -> Charges:
        """The ledger rows for a run of processed events, in order. :func:`charge_each` makes
        them with :meth:`charge`, an object per event; the pipeline calls this one."""
        ...


Slot = AbstractAsyncContextManager[object]  # what a handler holds while it works: a semaphore of --parallelism
Failures = list[tuple[int, Exception]]
_NO_SLOT: Slot = nullcontext()


async def process_each(handler: Handler, events: Sequence[OrderEvent], slot: Slot | None) -> Failures:
    """:meth:`Handler.process_run` made of :meth:`Handler.process`: one message after another,
    each holding ``slot`` while it works; a failure is noted and the next message goes on."""
    failures: Failures = []
    process, slot = handler.process, slot or _NO_SLOT
    for index, event in enumerate(events):
        try:
            async with slot:
                await process(event)
        except Exception as exc:
            failures.append((index, exc))
    return failures


def charge_each(handler: Handler, events: Sequence[OrderEvent], consumer: str) -> Charges:
    """:meth:`Handler.charges` made of :meth:`Handler.charge`: one :class:`Charge` per event."""
    charges = Charges(consumer)
    for event in events:
        charge = handler.charge(event, consumer)
        charges.add(charge.event_id, charge.order_id, charge.amount, charge.msg_id)
    return charges


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
        """True with no delay and no jitter: :meth:`process` then never waits."""
        # A subclass with its own process() may wait: it is not instant unless it says so.
        return self.delay_ms == 0 and self.jitter_ms == 0 and type(self).process is BillingHandler.process

    async def process(self, event: OrderEvent) -> None:
        """The simulated work; every ``fail_every``-th attempt fails transiently (no ack, retried)."""
        if self.delay_ms or self.jitter_ms:  # with no delay the handler does not sleep at all
            await asyncio.sleep(self.work_s())
        if self.fail_every:
            attempt = next(self._attempts)
            if attempt % self.fail_every == 0:
                raise TransientError(f"simulated failure: attempt {attempt} (fail every {self.fail_every})")

    async def process_run(self, events: Sequence[OrderEvent], slot: Slot | None) -> Failures:
        """The work for a run: nothing to call when there is nothing to await and nothing to fail
        (:attr:`instant` and no ``fail_every``), else :meth:`process` for each event."""
        if self.instant and not self.fail_every:
            return []
        return await process_each(self, events, slot)

    def charge(self, event: OrderEvent, consumer: str) -> Charge:
        """The ledger row for this event."""
        # Positional: a slotted dataclass built with keywords costs about twice as much, per message.
        return Charge(event.dedupe_key, event.order_id, str(event.amount), event.msg_id, consumer)

    def charges(self, events: Sequence[OrderEvent], consumer: str) -> Charges:
        """The ledger rows for a run: :meth:`charge`'s values, added to one flat list."""
        rows: list[str] = []
        for event in events:
            rows += (event.dedupe_key, event.order_id, str(event.amount), event.msg_id)
        return Charges(consumer, rows)


def billing_handler(settings: Settings) -> BillingHandler:
    """The lab's billing handler as the worker's flags set it (one per stream or shard: each its
    own attempt counter for ``fail_every``)."""
    return BillingHandler(stream=settings.stream, delay_ms=settings.handler_delay_ms,
                          jitter_ms=settings.handler_jitter_ms, fail_every=settings.fail_every)
