"""The XREADGROUP loop.

- First the consumer's own pending entries (id ``0``: what an earlier life of this consumer,
  or this one before a reconnect, read and did not ack), then new ones (``>``).
- ``COUNT`` is the prefetch; the loop reads again only when the pool has room.
- An empty reply after ``BLOCK`` is normal, not an error.
- Errors back off with jitter (a few calls a second at most, never a hot loop); after one,
  the loop re-reads its own pending entries, since a lost reply may have delivered some.
- NOGROUP (the stream was deleted, Redis restarted empty) recreates the group.
- The reply is taken as Redis sent it (:func:`xreadgroup_entries`): each entry's fields stay
  a flat list, which the parse reads at a glance, instead of a dict built for every entry.
- While the business store is down (:mod:`solutions.store_breaker`) it reads nothing; when
  the store is back it re-reads its own pending entries first: the messages that waited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from solutions.connection import (
    REDIS_ERRORS,
    Backoff,
    Client,
    Direct,
    Streak,
    classify,
    describe,
    execute,
    is_busygroup,
)
from solutions.messages import Delivery, RawFields, flat_fields
from solutions.settings import Settings
from solutions.store_breaker import StoreBreaker

log = logging.getLogger(__name__)

Dispatch = Callable[[list[Delivery]], Awaitable[int]]
OWN_PENDING = "0"
NEW = ">"
Entry = tuple[bytes, RawFields | None]  # an id and its fields (None: deleted while pending)
XREADGROUP = b"XREADGROUP"  # as bytes: see xreadgroup_entries


def decode_id(raw: bytes | str | int) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


async def ensure_group(client: Client, stream: str, group: str) -> bool:
    """``XGROUP CREATE stream group 0 MKSTREAM``; True if created, False if it existed (BUSYGROUP)."""
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if is_busygroup(exc):
            return False
        raise
    log.info("created group %s on stream %s", group, stream)
    return True


async def xreadgroup_entries(client: Client, settings: Settings, cursor: str, block_ms: int | None,
                             direct: Direct | None = None) -> list[Entry]:
    """``XREADGROUP GROUP group consumer COUNT count [BLOCK ms] STREAMS stream cursor``: the entries.

    redis-py turns every entry's fields into a dict (a Python call and a dict per message,
    more than the parse itself costs). It finds that conversion by the command's name, as a
    ``str``; sent with the name as bytes (the same bytes on the wire), the reply comes as
    hiredis built it: ``{stream: [[id, [name, value, ...]], ...]}`` (RESP3) or
    ``[[stream, [...]]]`` (RESP2). A client of another kind (a cluster client routes by the
    command's name) goes through ``xreadgroup`` and its dicts are flattened. With ``direct``
    (:class:`~solutions.connection.Direct`, a connection of the reader's own) the command skips
    the client's per-command work.
    """
    s = settings
    if not isinstance(client, aioredis.Redis):
        parsed = await client.xreadgroup(s.group, s.consumer, {s.stream: cursor}, count=s.count, block=block_ms)
        return _flattened(parsed)
    block = (b"BLOCK", block_ms) if block_ms is not None else ()
    args = (XREADGROUP, b"GROUP", s.group, s.consumer, b"COUNT", s.count, *block, b"STREAMS", s.stream, cursor)
    reply = await (direct.call(*args) if direct else execute(client, *args))
    if not reply:
        return []
    entries: list[Entry]
    if isinstance(reply, dict):  # RESP3: a map of one stream
        (entries,) = reply.values()
    else:
        entries = reply[0][1]
    return entries


def _flattened(parsed: Any) -> list[Entry]:
    """A parsed reply for one stream, in whichever shape redis-py gives it (``[[stream, entries]]``,
    ``{stream: entries}`` or ``{stream: [entries]}``), as raw entries with flat fields."""
    if not parsed:
        return []
    entries = next(iter(parsed.values())) if isinstance(parsed, dict) else parsed[0][1]
    if entries and isinstance(entries[0], list) and entries[0] and isinstance(entries[0][0], tuple | list):
        entries = entries[0]  # RESP3's {stream: [entries]}
    return [(i, flat_fields(f) if isinstance(f, dict) else f or None) for i, f in entries]


async def delivery_counts(client: Client, settings: Settings, ids: list[str]) -> dict[str, int]:
    """The delivery count Redis keeps for our pending ``ids`` (one ``XPENDING`` range call)."""
    if not ids:
        return {}
    rows = await client.xpending_range(
        settings.stream,
        settings.group,
        min=ids[0],
        max=ids[-1],
        count=len(ids) + 64,
        consumername=settings.consumer,
    )
    return {decode_id(row["message_id"]): int(row["times_delivered"]) for row in rows}


async def own_pending(client: Client, settings: Settings, count: int) -> list[str]:
    """``XPENDING stream group - + count consumer``: the ids this consumer holds, oldest first."""
    rows = await client.xpending_range(settings.stream, settings.group, min="-", max="+", count=count,
                                       consumername=settings.consumer)
    return [decode_id(row["message_id"]) for row in rows]


class Reader:
    """Reads for one consumer and hands batches of deliveries to ``dispatch``."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        dispatch: Dispatch,
        has_room: Callable[[asyncio.Event], Awaitable[None]],
        store: StoreBreaker | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.dispatch = dispatch
        self.has_room = has_room
        self.store = store
        self.backoff = Backoff()
        self.streak = Streak(log, f"XREADGROUP on {settings.stream}")
        self.unexpected = Streak(log, f"XREADGROUP on {settings.stream} (unexpected error)", level=logging.ERROR)
        self.cursor = OWN_PENDING
        self.direct = Direct(client)
        self.reads = 0
        self.errors = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Read until ``stop`` is set."""
        while not stop.is_set():
            await self.has_room(stop)
            if self.store is not None and not self.store.up:
                await self.store.wait_up(stop)
                self.cursor = OWN_PENDING  # what waited for the store is ours: charge it first
            if stop.is_set():
                return
            try:
                await self.read_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._recover(exc, stop)
            else:
                self.backoff.reset()
                self.streak.recovered()
                self.unexpected.recovered()

    async def read_once(self) -> None:
        """One ``XREADGROUP`` (own pending, or ``>`` with ``BLOCK``) and the dispatch of its entries."""
        s = self.settings
        block_ms = s.block_ms if self.cursor == NEW else None
        self.reads += 1
        entries = await xreadgroup_entries(self.client, s, self.cursor, block_ms, self.direct)
        if self.cursor == NEW:
            if entries:
                await self.dispatch([Delivery(i.decode(), f, 1, "new") for i, f in entries])
            return
        if not entries:
            log.debug("own pending entries done; reading new messages")
            self.cursor = NEW
            return
        ids = [decode_id(i) for i, _ in entries]
        counts = await delivery_counts(self.client, s, ids)
        self.cursor = ids[-1]
        await self.dispatch(
            [Delivery(i, f or None, counts.get(i, 1), "pending") for i, (_, f) in zip(ids, entries, strict=True)]
        )

    async def _recover(self, exc: BaseException, stop: asyncio.Event) -> None:
        self.errors += 1
        kind = classify(exc)
        if kind == "nogroup":
            log.warning("NOGROUP (stream deleted or Redis restarted empty): recreating group %s", self.settings.group)
            try:
                await ensure_group(self.client, self.settings.stream, self.settings.group)
            except REDIS_ERRORS as create_exc:
                log.warning("could not recreate the group yet: %s", describe(create_exc))
        elif kind == "recoverable":
            self.streak.failed(exc)
        else:
            self.unexpected.failed(exc)
        self.cursor = OWN_PENDING
        await self.backoff.sleep(stop)
