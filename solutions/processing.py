"""One message's way through the worker: validate, retry policy, dedupe, work, effect, ack.

Every delivery, new, re-read from the consumer's own pending list or reclaimed by the
rescuer, goes through :meth:`Processor.handle`:

1. a message that can never succeed (bad input) goes to the DLQ at once, with its reason;
2. a message delivered more than ``max_attempts`` times (its earlier holders died with it)
   goes to the DLQ without another try;
3. the dedupe strategy decides: do it, skip it as a duplicate (ack), or leave it (busy);
4. the handler does the work; if it fails, the message is not acked (it will be
   redelivered), unless this was delivery number ``max_attempts``: then the DLQ;
5. the strategy writes the charge and acks.

Nothing here raises: every outcome is counted, logged, and either acked or left pending.
"""

from __future__ import annotations

import asyncio
import logging

from solutions.acks import Acker
from solutions.dlq import DeadLetters
from solutions.handler import Handler
from solutions.idempotency import Strategy, Verdict
from solutions.messages import Delivery, OrderEvent, PermanentError
from solutions.metrics import Metrics

log = logging.getLogger(__name__)


class Processor:
    """Handles one delivery end to end (see the module docstring)."""

    def __init__(
        self,
        *,
        handler: Handler,
        strategy: Strategy,
        acker: Acker,
        dead_letters: DeadLetters,
        metrics: Metrics,
        consumer: str,
        max_attempts: int,
        slots: asyncio.Semaphore,
    ) -> None:
        self.handler = handler
        self.strategy = strategy
        self.acker = acker
        self.dead_letters = dead_letters
        self.metrics = metrics
        self.consumer = consumer
        self.max_attempts = max_attempts
        self.slots = slots
        self._work_lock = asyncio.Lock()  # batches do their work one at a time (handle_batch)

    async def handle(self, delivery: Delivery) -> None:
        """Process one delivery; never raises (except cancellation)."""
        event = await self._admit(delivery)
        if event is None:
            return
        try:
            verdict = await self.strategy.begin(event)
        except Exception as exc:
            await self._failed(delivery, f"dedupe check failed: {exc!r}")
            return
        if verdict is Verdict.DUPLICATE:
            await self._skip_duplicate(delivery)
        elif verdict is Verdict.BUSY:
            # Not a failure of the message: its lease expires with its holder, so a later
            # delivery proceeds. Dead-lettering it could race the holder's charge.
            self.metrics.inc("errors")
            log.info("%s: another consumer holds its processing lease; left pending", delivery.msg_id)
        else:
            await self._do(delivery, event)

    async def _do(self, delivery: Delivery, event: OrderEvent) -> None:
        try:
            async with self.slots:  # --parallelism bounds the work, not the batched I/O around it
                await self.handler.process(event)
        except Exception as exc:
            try:
                await self.strategy.abort(event)
            except Exception as undo_exc:
                log.warning("could not undo the dedupe mark of %s: %r", delivery.msg_id, undo_exc)
            await self._failed(delivery, f"{type(exc).__name__}: {exc}")
            return
        try:
            applied = await self.strategy.finish(event, self.handler.charge(event, self.consumer))
        except Exception as exc:
            # The charge may or may not be committed; the message stays pending and the
            # strategy decides on the redelivery.
            self.metrics.inc("errors")
            log.warning("%s: charge or ack failed, left pending: %r", delivery.msg_id, exc)
            return
        self.metrics.inc("acked")
        self.metrics.observe_processed(delivery.msg_id)
        if not applied:
            self.metrics.inc("dedupe_skipped")
            log.info(
                "%s: event %s was already applied; acked without a second charge",
                delivery.msg_id,
                event.dedupe_key,
            )

    @property
    def instant(self) -> bool:
        """True when the handler's work takes no time: :meth:`handle_batch` may be used."""
        return bool(getattr(self.handler, "instant", False)) and hasattr(self.handler, "process_now")

    async def handle_batch(self, deliveries: list[Delivery]) -> None:
        """Process a read batch as one unit (instant handlers only); same outcomes as :meth:`handle`.

        One dedupe round trip, the work inline (it takes no time), one ledger transaction and
        one XACK for the whole batch, instead of a task and a few futures per message.
        Batches do their work (up to the ledger commit) one at a time, in the order they were
        dispatched, so per-key order holds across batches; only the XACK of one batch runs
        alongside the work of the next, and a batch is acked only once its charges committed.
        """
        # The lock is the first thing a batch task does (no await before it), so batches take
        # it in the order the reader dispatched them.
        async with self._work_lock:
            done, echoes = await self._work_batch(await self._admit_batch(deliveries))
            applied = await self._record_batch(done)
        committed = await self._ack_batch(done, applied, keys=bool(echoes)) if applied is not None else set()
        if echoes:
            await self._settle_echoes(echoes, committed)

    async def _work_batch(
        self, admitted: list[tuple[Delivery, OrderEvent]]
    ) -> tuple[list[tuple[Delivery, OrderEvent]], list[tuple[Delivery, str]]]:
        """Dedupe (``begin_many``) and do the work; returns what is done and the echoes."""
        todo, echoes = self._split_echoes(admitted)
        if not todo:
            return [], echoes
        try:
            verdicts = await self.strategy.begin_many([event for _, event in todo])
        except Exception as exc:
            for delivery, _ in todo:
                await self._failed(delivery, f"dedupe check failed: {exc!r}")
            return [], []
        done: list[tuple[Delivery, OrderEvent]] = []
        failed: list[tuple[Delivery, OrderEvent, Exception]] = []
        process_now = self.handler.process_now  # type: ignore[attr-defined]
        for item, verdict in zip(todo, verdicts, strict=True):
            if verdict is Verdict.PROCEED:
                try:
                    process_now(item[1])
                    done.append(item)
                except Exception as exc:
                    failed.append((item[0], item[1], exc))
            elif verdict is Verdict.DUPLICATE:
                await self._skip_duplicate(item[0])
            else:  # BUSY
                self.metrics.inc("errors")
        await self._fail_batch(failed)
        return done, echoes

    async def _admit_batch(self, deliveries: list[Delivery]) -> list[tuple[Delivery, OrderEvent]]:
        """:meth:`_admit` for a batch: parse them all, then dead-letter the ones that can never succeed."""
        todo: list[tuple[Delivery, OrderEvent]] = []
        rejected: list[tuple[Delivery, str]] = []
        parse, max_attempts = self.handler.parse, self.max_attempts
        for delivery in deliveries:
            try:
                event = parse(delivery)
            except PermanentError as exc:
                rejected.append((delivery, f"permanent: {exc}"))
                continue
            if delivery.deliveries > max_attempts:
                reason = f"gave up: delivered {delivery.deliveries} times (max attempts {max_attempts})"
                rejected.append((delivery, reason))
            else:
                todo.append((delivery, event))
        for delivery, reason in rejected:
            await self._dead_letter(delivery, reason)
        return todo

    async def _record_batch(self, done: list[tuple[Delivery, OrderEvent]]) -> list[bool] | None:
        """Write the charges of ``done`` in one transaction; None if there is nothing to ack."""
        if not done:
            return None
        charge, consumer = self.handler.charge, self.consumer
        try:
            return await self.strategy.record([charge(event, consumer) for _, event in done])
        except Exception as exc:
            self._commit_failed(len(done), exc)
            return None

    async def _ack_batch(self, done: list[tuple[Delivery, OrderEvent]], applied: list[bool], *, keys: bool) -> set[str]:
        """Acknowledge a committed batch; returns its dedupe keys (when ``keys``) once acked."""
        try:
            await self.strategy.acknowledge([event for _, event in done])
        except Exception as exc:
            self._commit_failed(len(done), exc)
            return set()
        self.metrics.inc("acked", len(done))
        self.metrics.observe_batch(len(done), done[-1][0].msg_id)
        skipped = applied.count(False)
        if skipped:
            self.metrics.inc("dedupe_skipped", skipped)
        return {event.dedupe_key for _, event in done} if keys else set()

    def _commit_failed(self, n: int, exc: Exception) -> None:
        self.metrics.inc("errors", n)
        log.warning("charge or ack of %s messages failed, left pending: %r", n, exc)

    def _split_echoes(
        self, todo: list[tuple[Delivery, OrderEvent]]
    ) -> tuple[list[tuple[Delivery, OrderEvent]], list[tuple[Delivery, str]]]:
        """With dedupe on, a batch carrying the same event twice does it once; the echoes wait."""
        if self.strategy.name == "none":
            return todo, []
        first: dict[str, tuple[Delivery, OrderEvent]] = {}
        echoes: list[tuple[Delivery, str]] = []
        for delivery, event in todo:
            if event.dedupe_key in first:
                echoes.append((delivery, event.dedupe_key))
            else:
                first[event.dedupe_key] = (delivery, event)
        return (list(first.values()), echoes) if echoes else (todo, [])

    async def _settle_echoes(self, echoes: list[tuple[Delivery, str]], committed: set[str]) -> None:
        """Ack an echo whose event was just committed; otherwise leave it pending for a retry."""
        for delivery, key in echoes:
            if key in committed:
                await self._skip_duplicate(delivery)
            else:
                self.metrics.inc("errors")
                log.info("%s: same event as another message of its batch, which failed; left pending", delivery.msg_id)

    async def _admit(self, delivery: Delivery) -> OrderEvent | None:
        """Parse and check the delivery count; dead-letter what can never succeed."""
        try:
            event = self.handler.parse(delivery)
        except PermanentError as exc:
            await self._dead_letter(delivery, f"permanent: {exc}")
            return None
        if delivery.deliveries > self.max_attempts:
            reason = f"gave up: delivered {delivery.deliveries} times (max attempts {self.max_attempts})"
            await self._dead_letter(delivery, reason)
            return None
        return event

    async def _fail_batch(self, failed: list[tuple[Delivery, OrderEvent, Exception]]) -> None:
        if not failed:
            return
        try:
            await self.strategy.abort_many([event for _, event, _ in failed])
        except Exception as undo_exc:
            log.warning("could not undo the dedupe marks of %s messages: %r", len(failed), undo_exc)
        for delivery, _, error in failed:
            await self._failed(delivery, f"{type(error).__name__}: {error}")

    async def _skip_duplicate(self, delivery: Delivery) -> None:
        try:
            await self.acker.ack(delivery.msg_id)
        except Exception as exc:
            log.warning("%s: ack of a duplicate failed, left pending: %r", delivery.msg_id, exc)
            return
        self.metrics.inc("acked")
        self.metrics.inc("dedupe_skipped")
        log.info("%s: duplicate (dedupe marker present), acked without processing", delivery.msg_id)

    async def _failed(self, delivery: Delivery, reason: str) -> None:
        self.metrics.inc("errors")
        if delivery.deliveries >= self.max_attempts:
            await self._dead_letter(delivery, reason)
            return
        log.info(
            "%s: attempt %s of %s failed, left pending for redelivery: %s",
            delivery.msg_id,
            delivery.deliveries,
            self.max_attempts,
            reason,
        )

    async def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        try:
            moved = await self.dead_letters.send(delivery, reason)
        except Exception as exc:
            log.warning("%s: dead-lettering failed, left pending: %r", delivery.msg_id, exc)
            return
        if moved:
            self.metrics.inc("dead_lettered")
