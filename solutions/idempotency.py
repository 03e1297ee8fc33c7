"""Idempotency strategies (``--dedupe``): what makes a redelivered message harmless.

Redis Streams deliver at least once, so a message may come back after a crash, a reclaim or
a failover. Each strategy answers two questions: before the work, "was this event already
done?" (:meth:`Strategy.begin`), and after it, "record the effect and ack" (:meth:`Strategy.finish`).

- ``none``: no protection; every delivery charges again (duplicates stay countable).
- ``redis``: the course's marker, ``SET key 1 NX EX ttl`` before the work, ``DEL`` on
  failure. Cheap, but if the process dies between the marker and the work, the redelivery
  sees the marker, skips, and the work is lost.
- ``redis-2phase``: a processing lease first (``SET key lease NX PX lease_ms GET``), then a
  ``done`` marker written together with the XACK (one atomic script, like ``MULTI``). A dead holder's lease
  expires, so the redelivery does the work: nothing lost, duplicates still possible if the
  process dies after the charge but before the marker.
- ``sqlite``: the charge and its ``applied_events`` row commit in one transaction, so the
  effect happens exactly once whatever Redis remembers.

Marker TTLs must cover the stream's retention (``dedupe_ttl_s``), or a late duplicate
finds no marker. All Redis calls and SQLite commits are batched across concurrent handlers.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import sqlite3

from solutions.acks import Acker, encoded_ids
from solutions.batching import Coalescer
from solutions.connection import Client
from solutions.ledger import Charge, Ledger
from solutions.messages import OrderEvent

DONE = b"done"

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
DONE_AND_ACK_LUA = """
for i = 2, #KEYS do
    redis.call('SET', KEYS[i], ARGV[3], 'EX', ARGV[2])
end
return redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4))
"""


class Verdict(enum.Enum):
    PROCEED = "proceed"  # do the work
    DUPLICATE = "duplicate"  # already done: ack without doing it
    BUSY = "busy"  # someone else holds the lease: leave pending, retry later


async def write_ledger(ledger: Ledger, charges: list[Charge], *, once: bool) -> list[bool]:
    """One SQLite transaction for a batch of charges.

    A batch commit takes ~0.1 ms, less than a hop to a thread, so it runs inline; only when
    another worker process holds the write lock does it wait for the lock in a thread.
    """
    try:
        return ledger.write(charges, once=once, wait=False)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
    return await asyncio.to_thread(ledger.write, charges, once=once)


class Strategy:
    """``none``: charge on every delivery, then XACK."""

    name = "none"
    once = False

    def __init__(
        self,
        *,
        client: Client,
        acker: Acker,
        ledger: Ledger,
        key_prefix: str,
        ttl_s: int,
        lease_ms: int,
        consumer: str,
    ) -> None:
        self.client = client
        self.acker = acker
        self.ledger = ledger
        self.key_prefix = key_prefix
        self.ttl_s = ttl_s
        self.lease_ms = lease_ms
        self.consumer = consumer
        self._commits: Coalescer[tuple[OrderEvent, Charge], bool] = Coalescer("commit", self._commit)

    def key(self, event: OrderEvent) -> str:
        return self.key_prefix + event.dedupe_key

    async def begin(self, event: OrderEvent) -> Verdict:
        return Verdict.PROCEED

    async def abort(self, event: OrderEvent) -> None:
        """The work failed: undo whatever :meth:`begin` recorded."""

    async def finish(self, event: OrderEvent, charge: Charge) -> bool:
        """Write the charge, then acknowledge; False when the charge was skipped as a duplicate.

        Batched: one SQLite transaction for every charge in hand, then one round trip to
        Redis that acks exactly the messages of that committed transaction.
        """
        return await self._commits.submit((event, charge))

    async def begin_many(self, events: list[OrderEvent]) -> list[Verdict]:
        """:meth:`begin` for a whole batch in one round trip."""
        return [Verdict.PROCEED] * len(events)

    async def abort_many(self, events: list[OrderEvent]) -> None:
        """:meth:`abort` for a whole batch."""

    async def commit_many(self, items: list[tuple[OrderEvent, Charge]]) -> list[bool]:
        """:meth:`finish` for a whole batch: one transaction, then one acknowledgement."""
        return await self._commit(items)

    async def record(self, charges: list[Charge]) -> list[bool]:
        """The first half of :meth:`commit_many`: the charges in one ledger transaction."""
        return await write_ledger(self.ledger, charges, once=self.once)

    async def acknowledge(self, events: list[OrderEvent]) -> None:
        """The second half of :meth:`commit_many`, only for events :meth:`record` committed."""
        await self._acknowledge(events)

    async def _commit(self, items: list[tuple[OrderEvent, Charge]]) -> list[bool]:
        applied = await self.record([charge for _, charge in items])
        await self._acknowledge([event for event, _ in items])
        return applied

    async def _acknowledge(self, events: list[OrderEvent]) -> None:
        """``XACK stream group id ...`` for a committed batch."""
        await self.client.xack(self.acker.stream, self.acker.group, *encoded_ids([e.msg_id for e in events]))


class RedisMarker(Strategy):
    """``redis``: the course's ``SET NX EX`` marker before the work, ``DEL`` if the work fails."""

    name = "redis"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._marks: Coalescer[str, bool] = Coalescer("set-nx", self._set_nx)
        self._unmarks: Coalescer[str, bool] = Coalescer("del", self._delete)
        self._set_nx_script = self.client.register_script(SET_NX_LUA)

    async def _set_nx(self, keys: list[str]) -> list[bool]:
        """``SET key 1 NX EX ttl`` for each key, in one script call (``EVALSHA``)."""
        replies = await self._set_nx_script(keys=keys, args=[b"1", self.ttl_s])
        return [bool(int(reply)) for reply in replies]

    async def _delete(self, keys: list[str]) -> list[bool]:
        await self.client.delete(*keys)
        return [True] * len(keys)

    async def begin(self, event: OrderEvent) -> Verdict:
        """``SET key 1 NX EX ttl`` (batched): set now -> proceed, already there -> duplicate."""
        return Verdict.PROCEED if await self._marks.submit(self.key(event)) else Verdict.DUPLICATE

    async def abort(self, event: OrderEvent) -> None:
        """``DEL key`` so that the redelivery tries again."""
        await self._unmarks.submit(self.key(event))

    async def begin_many(self, events: list[OrderEvent]) -> list[Verdict]:
        marked = await self._set_nx([self.key(event) for event in events])
        return [Verdict.PROCEED if ok else Verdict.DUPLICATE for ok in marked]

    async def abort_many(self, events: list[OrderEvent]) -> None:
        if events:
            await self._delete([self.key(event) for event in events])


class RedisTwoPhase(RedisMarker):
    """``redis-2phase``: a lease before the work, a ``done`` marker with the XACK after it."""

    name = "redis-2phase"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.token = f"lease:{self.consumer}:{secrets.token_hex(4)}".encode()
        self._leases: Coalescer[str, bytes | None] = Coalescer("lease", self._take_leases)
        self._lease_script = self.client.register_script(LEASE_LUA)
        self._done_script = self.client.register_script(DONE_AND_ACK_LUA)

    async def _take_leases(self, keys: list[str]) -> list[bytes | None]:
        """``SET key lease NX PX lease_ms GET`` for each key, in one script call (``EVALSHA``)."""
        replies = await self._lease_script(keys=keys, args=[self.token, self.lease_ms])
        return [bytes(reply) or None for reply in replies]

    async def _acknowledge(self, events: list[OrderEvent]) -> None:
        """``SET key done EX ttl`` for each event and ``XACK`` them all, atomically (one script, like MULTI)."""
        keys = [self.acker.stream, *[self.key(e) for e in events]]
        args: list[bytes | str | int] = [self.acker.group, self.ttl_s, DONE, *[e.msg_id for e in events]]
        await self._done_script(keys=keys, args=args)

    async def begin(self, event: OrderEvent) -> Verdict:
        """``SET key lease NX PX lease_ms GET``: free -> proceed, ``done`` -> duplicate, leased -> busy."""
        return self._verdict(await self._leases.submit(self.key(event)))

    async def begin_many(self, events: list[OrderEvent]) -> list[Verdict]:
        return [self._verdict(previous) for previous in await self._take_leases([self.key(e) for e in events])]

    def _verdict(self, previous: bytes | None) -> Verdict:
        if previous is None or previous == self.token:
            return Verdict.PROCEED
        return Verdict.DUPLICATE if previous == DONE else Verdict.BUSY


class SqliteApplied(Strategy):
    """``sqlite``: the charge and its ``applied_events`` row in one transaction, then XACK."""

    name = "sqlite"
    once = True


STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (Strategy, RedisMarker, RedisTwoPhase, SqliteApplied)}


def make_strategy(name: str, **kwargs: object) -> Strategy:
    """The strategy called ``name`` (``none``, ``redis``, ``redis-2phase``, ``sqlite``)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown dedupe strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None
    return cls(**kwargs)  # type: ignore[arg-type]
