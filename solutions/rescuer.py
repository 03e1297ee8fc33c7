"""The rescuer: XAUTOCLAIM for messages whose consumer went silent, one rescuer per group.

Every ``claim_interval_ms`` the worker that holds the rescuer lease (a Redis key with a
TTL, renewed each round) claims pending entries idle for at least ``min_idle_ms``. Too
small a ``min_idle_ms`` steals messages from slow but living consumers (double work); the
course's rule is twice the handler's p99.

- The XAUTOCLAIM cursor carries over between rounds, so a long PEL is walked page by page.
- Entries deleted from the stream while pending (the reply's third element) are acked and
  counted: there is nothing left to process.
- Each reclaim is journaled: who took which id from whom, how long it was idle, how many
  times it had been delivered. The owner and idle time come from an ``XPENDING`` taken in
  the same ``MULTI`` as the XAUTOCLAIM, so they describe exactly what was claimed.
- Reclaimed messages go through the same path as new ones (dedupe, DLQ, ordering).
- While the business store is down (:mod:`solutions.store_breaker`) it claims nothing and
  lets its lease lapse: a reclaim would only spend a delivery attempt on the outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypedDict

from solutions.connection import REDIS_ERRORS, Backoff, Client, Streak, describe
from solutions.messages import Delivery, flat_fields
from solutions.metrics import Metrics
from solutions.reader import decode_id, delivery_counts
from solutions.settings import Settings
from solutions.store_breaker import StoreBreaker

log = logging.getLogger(__name__)
journal = logging.getLogger("solutions.journal")

RENEW_LEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""
RELEASE_LEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
MIN_LEASE_MS = 1000
MAX_PAGES_PER_ROUND = 16


class PendingRow(TypedDict):
    """One row of redis-py's ``xpending_range`` reply (``XPENDING ... IDLE``), as the journal reads it."""

    message_id: bytes
    consumer: bytes
    time_since_delivered: int
    times_delivered: int


class Rescuer:
    """Reclaims idle pending entries for the whole group while it holds the lease."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        metrics: Metrics,
        dispatch: Callable[[list[Delivery]], Awaitable[int]],
        has_room: Callable[[asyncio.Event], Awaitable[None]],
        store: StoreBreaker | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.dispatch = dispatch
        self.has_room = has_room
        self.store = store
        self.cursor = "0-0"
        self.lease_ms = max(MIN_LEASE_MS, 2 * settings.claim_interval_ms + 1000)
        self._renew = client.register_script(RENEW_LEASE_LUA)
        self._release = client.register_script(RELEASE_LEASE_LUA)
        self.holding = False
        self.asking = False  # a lease script is on its way: a cancel now may leave the lease ours
        self.backoff = Backoff(base_s=0.2, cap_s=5.0)
        self.streak = Streak(log, "rescuer round")

    async def run(self, stop: asyncio.Event) -> None:
        """Every ``claim_interval_ms`` until ``stop``: take or renew the lease, then claim."""
        interval_s = self.settings.claim_interval_ms / 1000
        while not stop.is_set():
            if self.store is not None and not self.store.up:  # the lease lapses: a worker whose store works may rescue
                await self.store.wait_up(stop)
                await _pause(stop, interval_s)  # the reader re-reads our own pending entries first
                continue
            try:
                if await self.take_lease():
                    await self.claim_round(stop)
                self.backoff.reset()
                self.streak.recovered()
            except REDIS_ERRORS as exc:
                self.streak.failed(exc)
                await self.backoff.sleep(stop)
                continue
            except Exception as exc:  # a bug: said with its traceback, then the loop goes on
                log.error("rescuer round raised %s", describe(exc), exc_info=exc)
                await self.backoff.sleep(stop)
                continue
            await _pause(stop, interval_s)

    async def take_lease(self) -> bool:
        """Renew our lease or take a free one (``GET``/``PEXPIRE``/``SET NX PX`` in one script)."""
        s = self.settings
        self.asking = True  # stays True if the stop cancels us after Redis ran the script
        got = int(await self._renew(keys=[s.rescuer_lease_key], args=[s.consumer, self.lease_ms])) == 1
        self.asking = False
        if got != self.holding:
            log.info("%s the rescuer lease of group %s on %s", "took" if got else "lost", s.group, s.stream)
            self.holding = got
        return got

    async def release_lease(self) -> None:
        """Give the lease up (only if it is ours) so another worker takes over at once.

        Also when a take was cancelled on its way (the stop lands while the script runs): Redis
        may have given us the lease though ``holding`` never learned it, and a lease left behind
        keeps every other rescuer out for ``lease_ms`` (61 s with the default interval). The
        script deletes the key only if it holds our name."""
        s = self.settings
        if self.holding or self.asking:
            await self._release(keys=[s.rescuer_lease_key], args=[s.consumer])
            self.holding = self.asking = False

    async def claim_round(self, stop: asyncio.Event) -> int:
        """Claim pages until the PEL has been walked (cursor back at ``0-0``); return how many."""
        total = 0
        for _ in range(MAX_PAGES_PER_ROUND):
            await self.has_room(stop)
            if stop.is_set() or (self.store is not None and not self.store.up):
                break
            total += await self.claim_page()
            if self.cursor == "0-0":
                break
        return total

    async def claim_page(self) -> int:
        """``MULTI; XPENDING IDLE ...; XAUTOCLAIM ...; EXEC`` from the cursor; dispatch what was claimed."""
        s = self.settings
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xpending_range(s.stream, s.group, min=self.cursor, max="+", count=s.count, idle=s.min_idle_ms)
            pipe.xautoclaim(s.stream, s.group, s.consumer, s.min_idle_ms, start_id=self.cursor, count=s.count)
            pending, claim = await pipe.execute()
        before = {decode_id(row["message_id"]): row for row in pending}
        self.cursor = decode_id(claim[0])
        claimed: list[tuple[bytes, Mapping[bytes, bytes] | None]] = list(claim[1])  # XAUTOCLAIM's, parsed
        deleted = [decode_id(i) for i in (claim[2] if len(claim) > 2 else [])]
        if deleted:
            await self._ack_deleted(deleted)
        missing = [decode_id(i) for i, _ in claimed if decode_id(i) not in before]
        counts = await delivery_counts(self.client, s, missing)
        deliveries = [self._journal(decode_id(raw_id), fields, before, counts) for raw_id, fields in claimed]
        accepted = await self.dispatch(deliveries) if deliveries else 0
        self.metrics.inc("reclaimed", accepted)
        return accepted

    def _journal(self, msg_id: str, fields: Mapping[bytes, bytes] | None, before: dict[str, PendingRow],
                 counts: dict[str, int]) -> Delivery:
        row = before.get(msg_id)
        owner = decode_id(row["consumer"]) if row else "?"
        idle_ms = int(row["time_since_delivered"]) if row else -1
        deliveries = int(row["times_delivered"]) + 1 if row else counts.get(msg_id, 1)
        journal.info(
            "reclaim: %s took %s from %s (idle %s ms, delivery %s)",
            self.settings.consumer,
            msg_id,
            owner,
            idle_ms,
            deliveries,
        )
        return Delivery(msg_id, flat_fields(fields) if fields else None, deliveries, "reclaimed")

    async def _ack_deleted(self, ids: list[str]) -> None:
        """Entries deleted from the stream while pending: nothing to process; the pipeline acks them."""
        s = self.settings
        await self.dispatch([Delivery(msg_id, None, 0, "deleted") for msg_id in ids])
        journal.info("reclaim: %s acked %s deleted entries: %s", s.consumer, len(ids), " ".join(ids[:20]))


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
