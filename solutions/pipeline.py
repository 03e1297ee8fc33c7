"""One message's way through the worker, top to bottom.

The reader and the rescuer hand every read batch to :meth:`Pipeline.dispatch`. It acks the
entries deleted from the stream while pending, skips messages already in hand, and splits
the rest into *runs*: the whole batch when the handler is instant (its work never waits, so
it is awaited inline), else one run per lane key (``--order-key``), so that waiting handlers
overlap (:mod:`solutions.runs`). Each run is one task (see :mod:`solutions.pool`) and goes
through :meth:`Pipeline.run`; what is not charged and acked goes to
:class:`~solutions.outcomes.Outcomes` (undo, give back, redeliver, dead-letter, ack a duplicate):

1. admit: a message that can never succeed (bad input) goes to the DLQ at once, with its
   reason; so does one delivered more than ``max_attempts`` times (its holders died with it);
2. wait for its turn: the runs before it on the same lane keys have recorded their charges;
3. begin: the dedupe strategy decides, per message, do it, skip it as a duplicate (ack), or
   leave it (someone else holds its lease). If Redis cannot decide (out of memory, no
   connection), the batch stays pending and the delivery does not count as an attempt.
   ``none`` and ``sqlite`` have nothing to ask before the work (``checks_first`` is False):
   the step is skipped;
4. work: the handler's work for the whole run in one call
   (:meth:`~solutions.handler.Handler.process_run`), each message holding one of
   ``--parallelism`` slots unless the handler is instant. A failure is not acked (the
   message will be redelivered) unless this was delivery number ``max_attempts``: then the
   DLQ. The strategy's mark is undone either way;
5. record: the charges in one ledger transaction. If that fails, the strategy's mark is
   undone too, so the redelivery does the work instead of taking it for a duplicate; then the
   next run of the lane may go. A failure of the store itself (locked past the busy timeout,
   disk full, I/O error, read-only ...) is not the message's: its delivery is given back (not
   an attempt) and the store's breaker opens, which pauses reading and reclaiming until the
   store answers again (:mod:`solutions.store_breaker`);
6. acknowledge: XACK exactly the recorded messages (with ``redis-2phase``, together with
   their ``done`` markers).

Steps 3, 5 and 6 are batched across the runs in hand (:class:`~solutions.batching.Coalescer`):
one script call, one transaction, one XACK for all of them. A commit that finds nothing else
on its way and the ledger free runs in the run's own task (``now``: no task of its own).
:meth:`Pipeline.settle` waits for those flushes at shutdown. A run that the drain deadline
cancels after its marks were set (``redis``, ``redis-2phase``) undoes them: in the work at
once, in the dedupe check or the commit once their flush has answered (the flush goes on
without the run); a mark left behind would make the redelivery a duplicate, acked and never
charged. Every XACK goes through
:class:`~solutions.acks.Acks`.
Nothing here raises on a failure of Redis, the store or the handler: every outcome is
counted, logged (a failure that lasts as one line when it starts, a summary now and then, and
one line when it ends; never a line per message), and either acked or left pending. A bug
that raises anything else ends its run; the pool logs it and the messages stay pending.

What keeps this path fast (each step measured in instructions per message with cachegrind,
against about 24k for the ceiling, a bare ``redis.asyncio`` loop that parses nothing):
the reply is taken as Redis sent it (:func:`~solutions.reader.xreadgroup_entries`: no dict
per entry) and the producer's field order is recognised at a glance
(:func:`~solutions.messages.parse_order`); a call per run, not per message, wherever the
work of a message is nothing (an instant handler's ``process_run``); a task per run, not per
message; one pass over a run per step; no object per message beyond its delivery and its
event: a run's charges are one flat list (:meth:`~solutions.handler.Handler.charges`,
:class:`~solutions.charges.Charges`; a ``Charge`` per message cost about 4k instructions); the
ledger binds what its rows share once per statement and ``sqlite`` claims a batch's events
from the charges just inserted (one ``INSERT OR IGNORE ... SELECT``: nothing bound twice);
the next read is already on its way while a batch is worked on (``has_room`` in
:func:`solutions.stream_part.build_part`).
From 60.7k to 40.8k instructions a message with ``none``, 77.7k to 52.2k with ``sqlite``.
Then, measured on the ``billing-worker`` process (CPU per message from ``/proc``, and A/B runs
of the process against the same Redis): the reader's XREADGROUP and the XACK of charged runs
skip redis-py's per-command work (:class:`~solutions.connection.Direct`: 5.4 to 4.9 us with
``none``); a commit with nothing else on its way runs in its run's task (``now`` in
:class:`~solutions.batching.Coalescer`); ``applied_events`` holds the key alone and the claim
needs no savepoint (:mod:`solutions.ledger`); the WAL bound follows the free space, so a
roomy disk checkpoints (and fsyncs) an eighth as often (:mod:`solutions.checkpoints`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from dataclasses import dataclass

from solutions.acks import Acks
from solutions.batching import Coalescer
from solutions.charges import Charges
from solutions.connection import REDIS_ERRORS, Streak, describe, not_the_message
from solutions.handler import Handler
from solutions.idempotency import Strategy, Verdict
from solutions.messages import Delivery, OrderEvent, PermanentError
from solutions.metrics import Metrics
from solutions.outcomes import Outcomes
from solutions.pool import Pool, Turn
from solutions.runs import ALL_LANES, Item, ids_text, split_echoes, split_runs
from solutions.sqlite_errors import LedgerUnavailable
from solutions.store_breaker import StoreBreaker

log = logging.getLogger(__name__)

__all__ = ["ALL_LANES", "Pipeline", "Rules", "split_echoes", "split_runs"]


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The settings the pipeline follows."""

    consumer: str
    max_attempts: int
    order_key: str


class Pipeline:
    """Handles every delivery end to end (see the module docstring)."""

    def __init__(self, *, handler: Handler, strategy: Strategy, acks: Acks, pool: Pool, metrics: Metrics,
                 rules: Rules, breaker: StoreBreaker) -> None:
        self.handler = handler
        self.strategy = strategy
        self.acks = acks
        self.pool = pool
        self.metrics = metrics
        self.rules = rules
        self.breaker = breaker
        self._refused = Streak(log, "dedupe check of a batch", action="left pending, not counted as an attempt")
        self._unacked = Streak(log, "XACK of charged messages", action="left pending for the strategy to judge")
        self._begins = Coalescer("begin", strategy.begin)
        self._records = Coalescer("record", self._record_flush, size=len, now=self._record_now)
        self._acknowledged: Coalescer[OrderEvent, None] = Coalescer("acknowledge", self._acknowledge_flush)
        self.outcomes = Outcomes(strategy=strategy, acks=acks, metrics=metrics, consumer=rules.consumer,
                                 max_attempts=rules.max_attempts)

    # -- dispatch: a read batch becomes runs ------------------------------------------------

    async def dispatch(self, deliveries: list[Delivery]) -> int:
        """Start the runs for a read batch; returns how many messages were taken on."""
        in_flight = self.pool.in_flight
        fresh = [d for d in deliveries if d.fields is not None and d.msg_id not in in_flight]
        runs = split_runs(fresh, instant=self.handler.instant, order_key=self.rules.order_key)
        for lanes, run in runs:  # no await before this: the reader and the rescuer both dispatch
            self.pool.start([d.msg_id for d in run], lanes, functools.partial(self.run, run))
        if len(fresh) < len(deliveries):
            await self.outcomes.ack_deleted([d.msg_id for d in deliveries if d.fields is None])
        return len(fresh)

    # -- one run, top to bottom -------------------------------------------------------------

    async def run(self, deliveries: list[Delivery], turn: Turn) -> None:
        """Admit, wait for the turn, begin, work, record, let the lane go, acknowledge."""
        todo = await self._admit(deliveries)
        await turn.wait()
        todo, echoes = split_echoes(todo) if self.strategy.deduplicates else (todo, [])
        proceed = await self._begin(todo)
        try:
            done = await self._work(proceed)
        except asyncio.CancelledError:  # a drain deadline in the work: none of it was done
            await self.outcomes.undo([event for _, event in proceed])  # or its marks outlive it: a lost event
            raise
        events, applied = await self._record(done)
        turn.done()
        acked = await self._acknowledge(events, applied) if events else False
        if echoes:
            await self.outcomes.settle_echoes(echoes, {event.dedupe_key for event in events} if acked else set())

    async def _admit(self, deliveries: list[Delivery]) -> list[Item]:
        """Parse, check the delivery count; dead-letter what can never succeed."""
        todo: list[Item] = []
        parse, max_attempts = self.handler.parse, self.rules.max_attempts
        for delivery in deliveries:
            try:
                event = parse(delivery)
            except PermanentError as exc:
                await self.outcomes.dead_letter(delivery, f"permanent: {exc}")
                continue
            if delivery.deliveries > max_attempts:
                reason = f"gave up: delivered {delivery.deliveries} times (max attempts {max_attempts})"
                await self.outcomes.dead_letter(delivery, reason)
            else:
                todo.append((delivery, event))
        return todo

    async def _begin(self, todo: list[Item]) -> list[Item]:
        """The strategy's verdicts: returns what to do; duplicates are acked, busy ones left pending."""
        if not todo or not self.strategy.checks_first:
            return todo
        asked = self._begins.enqueue([event for _, event in todo])
        try:
            verdicts = await asyncio.shield(asked)
        except asyncio.CancelledError:
            await self._undo_when_decided(todo, asked)
            raise
        except REDIS_ERRORS as exc:
            if not_the_message(exc):
                self._refused.failed(exc)
                await self.outcomes.give_back([delivery for delivery, _ in todo])
                return []
            for delivery, _ in todo:
                await self.outcomes.failed(delivery, f"dedupe check failed: {describe(exc)}")
            return []
        self._refused.recovered()
        proceed = [item for item, verdict in zip(todo, verdicts, strict=True) if verdict is Verdict.PROCEED]
        if len(proceed) < len(todo):
            duplicates = [d for (d, _), v in zip(todo, verdicts, strict=True) if v is Verdict.DUPLICATE]
            busy = len(todo) - len(proceed) - len(duplicates)
            if busy:
                # Not a failure of the message: its lease expires with its holder, so a later
                # delivery proceeds. Dead-lettering it could race the holder's charge.
                self.metrics.inc("errors", busy)
                log.info("%s messages: another consumer holds their processing lease; left pending", busy)
            await self.outcomes.skip_duplicates(duplicates)
        return proceed

    async def _undo_when_decided(self, todo: list[Item], asked: asyncio.Future[list[Verdict]]) -> None:
        """Cancelled (a drain deadline) while the dedupe check was on its way. Its flush goes on
        without us (:mod:`solutions.batching`), and a mark it sets for a message we will not
        work on would make the redelivery a "duplicate", acked and never charged. So wait for
        the verdicts and undo the marks that were ours."""
        try:
            verdicts = await asked
        except Exception:  # the check failed: it set nothing that we could undo
            return
        await self.outcomes.undo([event for (_, event), v in zip(todo, verdicts, strict=True) if v is Verdict.PROCEED])

    async def _undo_unless_recorded(self, events: list[OrderEvent], recorded: asyncio.Future[list[list[bool]]]) -> None:
        """Cancelled while the charges were on their way: their commit goes on without us. If it
        lands, the marks stay (the work is done); if it fails, they are undone."""
        try:
            await recorded
        except Exception:
            await self.outcomes.undo(events)

    async def _work(self, todo: list[Item]) -> list[Item]:
        """The handler's work for the run (:meth:`~solutions.handler.Handler.process_run`), each
        message holding a slot unless the handler is instant; returns what was done."""
        if not todo:
            return todo
        slot = None if self.handler.instant else self.pool.slot()  # instant: one at a time anyway
        failures = await self.handler.process_run([event for _, event in todo], slot)
        if not failures:
            return todo
        failed = dict(failures)
        await self.outcomes.undo([todo[index][1] for index in failed])
        for index, error in failed.items():
            await self.outcomes.failed(todo[index][0], f"{type(error).__name__}: {error}")
        return [item for index, item in enumerate(todo) if index not in failed]

    async def _record(self, done: list[Item]) -> tuple[list[OrderEvent], list[bool]]:
        """Write the charges (one transaction with the other runs in hand); returns the recorded
        events and, for each, whether it was applied (False: skipped as already applied)."""
        if not done:
            return [], []
        events = [event for _, event in done]
        try:
            charges = self.handler.charges(events, self.rules.consumer)
            if len(charges) != len(events):  # a handler's bug: nothing written, the messages stay pending
                raise ValueError(f"the handler made {len(charges)} charges for {len(events)} events")
            if self.strategy.checks_first:  # marks were set before the work: a cancel must not strand them
                recorded = self._records.enqueue([charges])
                try:
                    (applied,) = await asyncio.shield(recorded)
                except asyncio.CancelledError:
                    await self._undo_unless_recorded(events, recorded)
                    raise
            else:
                (applied,) = await self._records.submit([charges])
        except LedgerUnavailable as exc:  # the store's fault: a pause, not an attempt
            self.breaker.failed(exc, len(done))
            await self.outcomes.undo(events)
            await self.outcomes.give_back([delivery for delivery, _ in done])
            return [], []
        except Exception as exc:  # anything else (the ledger refused these charges, a bug): an attempt
            self.metrics.inc("errors", len(done))
            log.warning("charge of %s messages failed, left pending for redelivery: %s", len(done), describe(exc),
                        exc_info=not isinstance(exc, sqlite3.Error))
            await self.outcomes.undo(events)  # or the redelivery looks like a duplicate
            return [], []
        return events, applied

    async def _acknowledge(self, events: list[OrderEvent], applied: list[bool]) -> bool:
        """XACK the recorded messages; True once acked."""
        try:
            await self._acknowledged.submit(events)
        except REDIS_ERRORS as exc:  # charged, left pending: the strategy judges the redelivery (none: again)
            self.metrics.inc("errors", len(events))
            self._unacked.failed(exc)
            return False
        self._unacked.recovered()
        self.metrics.inc("acked", len(events))
        self.metrics.observe_batch(len(events), events[-1].msg_id)
        if not all(applied):
            skipped = [event.msg_id for event, ok in zip(events, applied, strict=True) if not ok]
            self.metrics.inc("dedupe_skipped", len(skipped))
            log.info("already applied, acked without a second charge: %s", ids_text(skipped))
        return True

    # -- batching ---------------------------------------------------------------------------

    async def _record_flush(self, batches: list[Charges]) -> list[list[bool]]:
        self.breaker.refuse()  # while the store is down, a charge on its way fails at once
        applied = await self.strategy.record(batches)
        self.breaker.committed()
        return _each(batches, applied)

    def _record_now(self, batches: list[Charges]) -> list[list[bool]] | None:
        """:meth:`_record_flush` in the caller's task, if the ledger needs no wait (see
        :mod:`solutions.batching`); None, having written nothing, if it does."""
        self.breaker.refuse()
        applied = self.strategy.record_now(batches)
        if applied is None:
            return None
        self.breaker.committed()
        return _each(batches, applied)

    async def _acknowledge_flush(self, events: list[OrderEvent]) -> list[None]:
        await self.strategy.acknowledge(events)
        return [None] * len(events)

    @property
    def charges_on_their_way(self) -> int:
        """Charges handed to the ledger and not yet committed (or failed)."""
        return self._records.pending

    async def settle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` in all for every batched dedupe call, commit and XACK still on its way;
        True if all landed."""
        deadline = time.monotonic() + timeout_s
        settled = True
        for coalescer in (self._begins, self._records, self._acknowledged, self.outcomes.duplicates):
            settled = await coalescer.wait_idle(max(0.0, deadline - time.monotonic())) and settled
        return settled


def _each(batches: list[Charges], applied: list[bool]) -> list[list[bool]]:
    """Each run's verdicts, back from the one transaction of all of them."""
    if len(batches) == 1:
        return [applied]
    each: list[list[bool]] = []
    start = 0
    for batch in batches:
        each.append(applied[start : start + len(batch)])
        start += len(batch)
    return each
