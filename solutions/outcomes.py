"""What becomes of a message that is not charged and acked in its run: every other outcome, in one place.

A :class:`~solutions.pipeline.Pipeline` run either charges and acks its messages, or hands each
of the rest to :class:`Outcomes`:

- :meth:`Outcomes.undo`: the dedupe strategy's marks taken back (a failed work or commit, a
  cancel), or the redelivery would look like a duplicate, acked and never charged;
- :meth:`Outcomes.give_back`: not the message's fault (Redis out of memory or away, the store
  down): left pending with its delivery count set back, not an attempt;
- :meth:`Outcomes.failed`: an attempt that failed: left pending for redelivery, or after
  ``max_attempts`` deliveries moved to the DLQ (:meth:`Outcomes.dead_letter`);
- :meth:`Outcomes.skip_duplicates`: already done: XACKed without a second charge (batched across
  the runs in hand, :class:`~solutions.batching.Coalescer`); :meth:`Outcomes.settle_echoes`
  for the second copies of an event in one run;
- :meth:`Outcomes.ack_deleted`: entries deleted from the stream while pending: XACKed.

None of these raises on a failure of Redis: it is counted and logged (a failure that lasts as
one line when it starts and one when it ends), and the message stays pending.
"""

from __future__ import annotations

import logging

from solutions.acks import Acks
from solutions.batching import Coalescer
from solutions.connection import REDIS_ERRORS, Streak, describe
from solutions.idempotency import Strategy
from solutions.messages import Delivery, OrderEvent
from solutions.metrics import Metrics
from solutions.runs import ids_text

log = logging.getLogger("solutions.pipeline")  # the pipeline's lines, as they were before this module


class Outcomes:
    """The outcomes of the messages a run does not charge and ack (see the module docstring)."""

    def __init__(self, *, strategy: Strategy, acks: Acks, metrics: Metrics, consumer: str,
                 max_attempts: int) -> None:
        self.strategy = strategy
        self.acks = acks
        self.metrics = metrics
        self.consumer = consumer
        self.max_attempts = max_attempts
        self._kept = Streak(log, "giving deliveries back (XCLAIM RETRYCOUNT)", action="they count as attempts")
        self.duplicates: Coalescer[str, None] = Coalescer("xack", self._ack_flush)

    async def undo(self, events: list[OrderEvent]) -> None:
        """The strategy's marks of ``events`` taken back (a warning if Redis cannot)."""
        try:
            await self.strategy.abort(events)
        except REDIS_ERRORS as exc:
            log.warning("could not undo the dedupe marks of %s messages: %s", len(events), describe(exc))

    async def give_back(self, deliveries: list[Delivery]) -> None:
        """Not the message's fault (Redis out of memory or away, the store down): leave it pending
        and set its delivery count back, or restarts under OOM or a long store outage would
        dead-letter good events. The caller logs the cause once (a streak, the breaker)."""
        self.metrics.inc("errors", len(deliveries))
        try:
            await self.acks.give_back(deliveries, self.consumer)
        except REDIS_ERRORS as exc:
            self._kept.failed(exc)
            return
        self._kept.recovered()

    async def skip_duplicates(self, deliveries: list[Delivery]) -> None:
        """XACK what was done before (a dedupe marker, an applied event), without doing it again."""
        if not deliveries:
            return
        try:
            await self.duplicates.submit([d.msg_id for d in deliveries])
        except REDIS_ERRORS as exc:
            log.warning("ack of %s duplicates failed, left pending: %s", len(deliveries), describe(exc))
            return
        self.metrics.inc("acked", len(deliveries))
        self.metrics.inc("dedupe_skipped", len(deliveries))
        ids = ids_text([d.msg_id for d in deliveries])
        log.info("duplicates (dedupe marker present), acked without processing: %s", ids)

    async def settle_echoes(self, echoes: list[tuple[Delivery, str]], acked: set[str]) -> None:
        """Ack an echo whose event was just charged and acked; otherwise leave it pending for a retry."""
        await self.skip_duplicates([delivery for delivery, key in echoes if key in acked])
        left = [delivery.msg_id for delivery, key in echoes if key not in acked]
        if left:
            self.metrics.inc("errors", len(left))
            log.info("same event as another message of its run, which failed; left pending: %s", ids_text(left))

    async def failed(self, delivery: Delivery, reason: str) -> None:
        """An attempt that failed: left pending for redelivery, or the DLQ after ``max_attempts``."""
        self.metrics.inc("errors")
        if delivery.deliveries >= self.max_attempts:
            await self.dead_letter(delivery, reason)
            return
        log.info(
            "%s: attempt %s of %s failed, left pending for redelivery: %s",
            delivery.msg_id,
            delivery.deliveries,
            self.max_attempts,
            reason,
        )

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """To ``<stream>:dlq`` with ``reason``, acked in the same script (:meth:`~solutions.acks.Acks.dead_letter`)."""
        try:
            moved = await self.acks.dead_letter(delivery, reason)
        except REDIS_ERRORS as exc:
            log.warning("%s: dead-lettering failed, left pending: %s", delivery.msg_id, describe(exc))
            return
        if moved:
            self.metrics.inc("dead_lettered")

    async def ack_deleted(self, ids: list[str]) -> None:
        """Pending entries deleted from the stream: nothing to process, XACK them."""
        if ids:
            await self.acks.ack(ids)
            self.metrics.inc("deleted", len(ids))
            log.info("acked %s pending entries that were deleted from the stream", len(ids))

    async def _ack_flush(self, ids: list[str]) -> list[None]:
        await self.acks.ack(list(dict.fromkeys(ids)))
        return [None] * len(ids)
