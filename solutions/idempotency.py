"""Idempotency strategies (``--dedupe``): what makes a redelivered message harmless.

Redis Streams deliver at least once, so a message may come back after a crash, a reclaim or
a failover. Every strategy is a :class:`Strategy`: four batch calls that the pipeline makes
around the handler's work, in this order:

1. :meth:`~Strategy.begin`: before the work, "was this event already done?" (a verdict each);
2. :meth:`~Strategy.abort`: the work or the charge failed, undo what ``begin`` recorded;
3. :meth:`~Strategy.record`: write the charges, one SQLite transaction;
4. :meth:`~Strategy.acknowledge`: XACK what was recorded (through :class:`~solutions.acks.Acks`).

The strategies:

- ``none``: no protection; every delivery charges again (duplicates stay countable).
- ``redis``: the course's marker, ``SET key 1 NX EX ttl`` before the work, ``DEL`` when the
  work or the charge fails. Cheap, but if the process dies between the marker and the
  charge, the redelivery sees the marker, skips, and the work is lost.
- ``redis-2phase``: a processing lease first (``SET key lease NX PX lease_ms GET``), then a
  ``done`` marker written together with the XACK (one atomic script). A dead holder's lease
  expires, so the redelivery does the work: nothing lost, duplicates still possible if the
  process dies after the charge but before the marker.
- ``sqlite``: the charge and its ``applied_events`` row commit in one transaction, so the
  effect happens exactly once whatever Redis remembers.

When the charge cannot be recorded (the store is down: locked, full, failing, read-only), the
failed transaction wrote nothing, and each strategy's mark must not outlive it:

- ``none`` and ``sqlite`` marked nothing in Redis (``sqlite``'s ``applied_events`` row was
  rolled back with the charge): nothing to undo;
- ``redis``: the ``SET NX`` marker must go (``DEL`` in :meth:`~Strategy.abort`, or owed until
  Redis answers), or the redelivery would be acked as a duplicate and the event lost;
- ``redis-2phase``: the lease is deleted, so the redelivery after the outage proceeds at once
  instead of finding the lease busy (a lease that could not be deleted expires by itself).

The pipeline then gives the delivery back (not an attempt) and the store's breaker pauses
reading until the store answers (:mod:`solutions.store_breaker`).

Marker TTLs must cover the stream's retention (``dedupe_ttl_s``), or a late duplicate
finds no marker.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from solutions.acks import DONE, Acks
from solutions.charges import Charges
from solutions.connection import REDIS_ERRORS, Client
from solutions.ledger import Ledger
from solutions.messages import OrderEvent
from solutions.sqlite_errors import Fault, LedgerUnavailable

log = logging.getLogger(__name__)

# One call for a whole batch of markers: a pipeline of N commands costs N times the
# client-side work, a script with N keys costs it once. Scripts run atomically.
SET_NX_LUA = """
local out = {}
for i, key in ipairs(KEYS) do
    out[i] = redis.call('SET', key, ARGV[1], 'NX', 'EX', ARGV[2]) and 1 or 0
end
return out
"""
LEASE_LUA = """
local out = {}
for i, key in ipairs(KEYS) do
    out[i] = redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2], 'GET') or ''
end
return out
"""


class Verdict(enum.Enum):
    PROCEED = "proceed"  # do the work
    DUPLICATE = "duplicate"  # already done: ack without doing it
    BUSY = "busy"  # someone else holds the lease: leave pending, retry later


class Strategy(Protocol):
    """What the pipeline needs from a dedupe strategy (every call takes a batch)."""

    name: str
    deduplicates: bool  # False for ``none``: the same event twice in a run is charged twice
    checks_first: bool  # False when begin() always says PROCEED: the pipeline then skips it

    async def begin(self, events: list[OrderEvent]) -> list[Verdict]:
        """Before the work: one verdict per event."""
        ...

    async def abort(self, events: Sequence[OrderEvent]) -> None:
        """The work or the charge failed: undo whatever :meth:`begin` recorded."""
        ...

    async def record(self, batches: list[Charges]) -> list[bool]:
        """The charges in one ledger transaction; per charge, in order, False if skipped as already applied."""
        ...

    def record_now(self, batches: list[Charges]) -> list[bool] | None:
        """:meth:`record` if it can be done without waiting (another process holds the ledger's
        lock: None, and nothing was written)."""
        ...

    async def acknowledge(self, events: Sequence[OrderEvent]) -> None:
        """XACK the messages of recorded charges."""
        ...


@dataclass(frozen=True, kw_only=True)
class Deps:
    """What a strategy is built from."""

    client: Client
    acks: Acks
    ledger: Ledger
    key_prefix: str
    ttl_s: int
    lease_ms: int
    consumer: str


async def write_ledger(ledger: Ledger, batches: list[Charges], *, once: bool) -> list[bool]:
    """One SQLite transaction for a batch of charges.

    A batch commit takes ~0.1 ms, less than a hop to a thread, so it runs inline; only when
    another process holds the write lock does it wait for the lock (up to the ledger's busy
    timeout) in a thread. A lock held longer, or any other failure of the store, raises
    :class:`~solutions.sqlite_errors.LedgerUnavailable`: nothing was written.
    """
    applied = write_ledger_now(ledger, batches, once=once)
    if applied is not None:
        return applied
    return await asyncio.to_thread(ledger.write_batches, batches, once=once)


def write_ledger_now(ledger: Ledger, batches: list[Charges], *, once: bool) -> list[bool] | None:
    """:func:`write_ledger` without waiting: None when another process holds the write lock."""
    try:
        return ledger.write_batches(batches, once=once, wait=False)
    except LedgerUnavailable as exc:
        if exc.fault is not Fault.LOCKED:
            raise
    return None


class _LedgerThenXack:
    """Not a strategy by itself: what strategies share. The charge write and a plain XACK, and,
    for those that record nothing before the work (``checks_first`` False, so the pipeline
    skips :meth:`begin`), a ``begin`` that says proceed and an ``abort`` with nothing to undo."""

    once = False
    checks_first = False

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def begin(self, events: list[OrderEvent]) -> list[Verdict]:
        return [Verdict.PROCEED] * len(events)

    async def abort(self, events: Sequence[OrderEvent]) -> None:
        return None

    async def record(self, batches: list[Charges]) -> list[bool]:
        return await write_ledger(self.deps.ledger, batches, once=self.once)

    def record_now(self, batches: list[Charges]) -> list[bool] | None:
        return write_ledger_now(self.deps.ledger, batches, once=self.once)

    async def acknowledge(self, events: Sequence[OrderEvent]) -> None:
        await self.deps.acks.ack([event.msg_id for event in events])


class NoDedupe(_LedgerThenXack):
    """``none``: charge on every delivery, then XACK."""

    name = "none"
    deduplicates = False


class SqliteApplied(_LedgerThenXack):
    """``sqlite``: the charge and its ``applied_events`` row in one transaction, then XACK.

    Nothing to check before the work and nothing to undo: :meth:`record` skips an event
    already applied, and a failed transaction wrote nothing.
    """

    name = "sqlite"
    deduplicates = True
    once = True


class RedisMarker(_LedgerThenXack):
    """``redis``: the course's ``SET NX EX`` marker before the work, ``DEL`` if the work or the charge fails.

    When that ``DEL`` fails too (Redis is down: the failover that made the work fail), the
    marker outlives work that was never done, and its redelivery would be acked as a
    duplicate: a lost event. So the worker remembers the markers it still owes a ``DEL``, and
    its next :meth:`begin` (the next batch, normally well before anyone's min idle) deletes
    them first.
    What no worker can see is a ``DEL`` the old master answered but never replicated; that is
    the strategy's remaining gap (``redis-2phase`` and ``sqlite`` do not have it).
    """

    name = "redis"
    deduplicates = True
    checks_first = True

    def __init__(self, deps: Deps) -> None:
        super().__init__(deps)
        self._set_nx = deps.client.register_script(SET_NX_LUA)
        self.owed: set[str] = set()  # marker keys whose DEL failed: this worker set them, the work was not done

    def keys(self, events: Sequence[OrderEvent]) -> list[str]:
        prefix = self.deps.key_prefix
        return [prefix + event.dedupe_key for event in events]

    async def begin(self, events: list[OrderEvent]) -> list[Verdict]:
        """``SET key 1 NX EX ttl`` per event (one script): set now -> proceed, already there -> duplicate."""
        await self._delete_owed()
        replies = await self._set_nx(keys=self.keys(events), args=[b"1", self.deps.ttl_s])
        return [Verdict.PROCEED if int(reply) else Verdict.DUPLICATE for reply in replies]

    async def abort(self, events: Sequence[OrderEvent]) -> None:
        """``DEL key ...`` so that the redelivery tries again; if that fails, the keys are owed."""
        if not events:
            return
        keys = self.keys(events)
        try:
            await self.deps.client.delete(*keys)
        except REDIS_ERRORS:
            self.owed.update(keys)
            raise

    async def _delete_owed(self) -> None:
        if not self.owed:
            return
        owed = list(self.owed)
        try:
            await self.deps.client.delete(*owed)
        except REDIS_ERRORS as exc:  # Redis still away: the next begin tries again
            log.debug("dedupe marks owed a DEL still not deleted: %r", exc)
            return
        self.owed.difference_update(owed)
        log.info("deleted %s dedupe marks left by failed work while Redis was away", len(owed))


class RedisTwoPhase(RedisMarker):
    """``redis-2phase``: a lease before the work, a ``done`` marker with the XACK after the charge."""

    name = "redis-2phase"

    def __init__(self, deps: Deps) -> None:
        super().__init__(deps)
        self.token_prefix = f"lease:{deps.consumer}:{secrets.token_hex(4)}:"
        self._leases = itertools.count(1)
        self._lease = deps.client.register_script(LEASE_LUA)

    async def begin(self, events: list[OrderEvent]) -> list[Verdict]:
        """``SET key lease NX PX lease_ms GET`` per event: free -> proceed, ``done`` -> duplicate, leased -> busy.

        Each call leases with a token of its own, so a lease this worker took for another
        message of the same event (a re-send beside a reclaimed original, in another run, or
        in the same batched call) is busy like anyone else's: one of the two is charged, the
        other is retried later, when the ``done`` marker makes it a duplicate.
        """
        token = f"{self.token_prefix}{next(self._leases)}"
        replies = await self._lease(keys=self.keys(events), args=[token, self.deps.lease_ms])
        return [_lease_verdict(bytes(reply)) for reply in replies]

    async def abort(self, events: Sequence[OrderEvent]) -> None:
        """``DEL`` the leases; if that fails, each expires after ``lease_ms`` by itself.

        Nothing is owed here: deleting a lease later could delete another worker's newer one.
        """
        if events:
            await self.deps.client.delete(*self.keys(events))

    async def acknowledge(self, events: Sequence[OrderEvent]) -> None:
        """``SET key done EX ttl`` for each event and ``XACK`` them all, atomically."""
        ids = [event.msg_id for event in events]
        await self.deps.acks.ack_marking_done(ids, self.keys(events), self.deps.ttl_s)


def _lease_verdict(previous: bytes) -> Verdict:
    """What ``SET ... NX GET`` answered: nothing (the lease is ours now), ``done``, or someone's lease."""
    if not previous:
        return Verdict.PROCEED
    return Verdict.DUPLICATE if previous == DONE else Verdict.BUSY


STRATEGIES: dict[str, Callable[[Deps], Strategy]] = {
    "none": NoDedupe,
    "redis": RedisMarker,
    "redis-2phase": RedisTwoPhase,
    "sqlite": SqliteApplied,
}


def make_strategy(name: str, deps: Deps) -> Strategy:
    """The strategy called ``name`` (``none``, ``redis``, ``redis-2phase``, ``sqlite``)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown dedupe strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None
    return cls(deps)
