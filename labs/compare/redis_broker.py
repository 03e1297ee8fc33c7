"""Redis Streams the course's way: XADD (optionally WAIT 1) on the Sentinel master, a consumer group,
XACK after the charge, XPENDING/XCLAIM of idle entries for redelivery, the dead letters moved by the
reference worker's Lua script (XACK, then XADD to ``<stream>:dlq`` only if the XACK removed it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.exceptions

from labs.compare.contract import Delivery, Event, Outcome, Settings
from solutions.acks import DEAD_LETTER_LUA
from solutions.connection import connect

log = logging.getLogger(__name__)
GROUP = "billing"
FIELDS = ("type", "event_id", "order_id", "amount", "produced_at_ms", "seq")


class RedisBroker:
    def __init__(self, sentinels: list[tuple[str, int]], stream: str, settings: Settings,
                 master_name: str = "mymaster") -> None:
        self.name = "redis+WAIT" if settings.wait_replicas else "redis"
        self.sentinels = tuple(sentinels)
        self.master_name = master_name
        self.stream = stream
        self.settings = settings
        self.client: Any = None

    def durability(self) -> str:
        wait = f", WAIT {self.settings.wait_replicas} after each XADD" if self.settings.wait_replicas else \
            ", no WAIT (asynchronous replication)"
        return f"Sentinel, 1 master + 1 replica, appendonly yes, appendfsync everysec{wait}"

    async def connect(self) -> None:
        self.client = connect(redis_url="", sentinels=self.sentinels, master_name=self.master_name,
                              socket_timeout_s=self.settings.publish_timeout_s)
        self._dead_letter = self.client.register_script(DEAD_LETTER_LUA)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def publish(self, event: Event) -> Outcome:
        """XADD the event's fields; with ``wait_replicas``, WAIT for that many replicas (fewer: unknown)."""
        fields = {"type": event.type, "event_id": event.event_id, "order_id": event.order_id,
                  "amount": event.amount, "produced_at_ms": str(event.produced_at_ms), "seq": str(event.seq)}
        try:
            await self.client.xadd(self.stream, fields)
            if self.settings.wait_replicas:
                timeout_ms = int(self.settings.publish_timeout_s * 1000)
                acked = await self.client.execute_command("WAIT", self.settings.wait_replicas, timeout_ms)
                if int(acked) < self.settings.wait_replicas:
                    return Outcome.UNKNOWN  # on the master, not (yet) on a replica: re-send
            return Outcome.CONFIRMED
        except redis.exceptions.ResponseError:
            return Outcome.REFUSED  # READONLY (a demoted master), OOM ...
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            return Outcome.UNKNOWN

    async def _ensure_group(self) -> None:
        try:
            await self.client.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _delivery(self, msg_id: bytes | str, fields: dict[bytes, bytes], attempt: int) -> Delivery:
        mid = msg_id.decode() if isinstance(msg_id, bytes) else msg_id
        decoded = {k.decode(): v.decode() for k, v in fields.items()}
        try:
            event: Event | None = Event(decoded["event_id"], decoded["order_id"], decoded["amount"],
                                        int(decoded.get("produced_at_ms") or 0), decoded.get("type", "order.paid"),
                                        int(decoded.get("seq") or 0))
        except (KeyError, ValueError):
            event = None
        flat = [x for kv in fields.items() for x in kv]

        async def ack() -> None:
            await self.client.xack(self.stream, GROUP, mid)

        async def retry() -> None:  # stays pending: claimed again once idle for redeliver_after_ms
            return None

        async def dead_letter(reason: str) -> None:
            await self._dead_letter(keys=[self.stream, f"{self.stream}:dlq"],
                                    args=[GROUP, mid, *flat, "id", mid, "error", reason, "attempts", str(attempt)])

        return Delivery(event, repr(decoded).encode(), attempt, mid, ack, retry, dead_letter)

    async def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]:
        """Idle pending entries first (XPENDING IDLE + XCLAIM), then new ones (XREADGROUP >)."""
        min_idle_ms = self.settings.redeliver_after_ms
        next_claim = 0.0
        while not stop.is_set():
            try:
                await self._ensure_group()
                if time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + min_idle_ms / 2000
                    pending = await self.client.xpending_range(self.stream, GROUP, "-", "+", self.settings.prefetch,
                                                               idle=min_idle_ms)
                    counts = {p["message_id"]: int(p["times_delivered"]) for p in pending}
                    if counts:
                        claimed = await self.client.xclaim(self.stream, GROUP, consumer, min_idle_ms, list(counts))
                        for msg_id, fields in claimed:
                            if fields:
                                yield self._delivery(msg_id, fields, counts.get(msg_id, 1) + 1)
                reply = await self.client.xreadgroup(GROUP, consumer, {self.stream: ">"},
                                                     count=self.settings.prefetch, block=300)
                for _stream, entries in reply or []:
                    for msg_id, fields in entries:
                        yield self._delivery(msg_id, fields, 1)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
                    redis.exceptions.ResponseError) as exc:
                log.info("%s: %s, retrying", consumer, type(exc).__name__)
                await asyncio.sleep(0.2)

    async def dead_letters(self) -> list[str]:
        entries = await self.client.xrange(f"{self.stream}:dlq")
        return [fields.get(b"event_id", b"?").decode() for _id, fields in entries]

    async def backlog(self) -> int:
        """Entries not yet delivered plus delivered and not acked (XINFO GROUPS lag + pending)."""
        groups = await self.client.xinfo_groups(self.stream)
        for g in groups:
            name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
            if name == GROUP:
                return int(g.get("lag") or 0) + int(g["pending"])
        return int(await self.client.xlen(self.stream))
