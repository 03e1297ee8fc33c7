"""Redis Streams the course's way, on the worker's own Redis rules from ``solutions/``.

Publishing is :class:`solutions.sender.Sender`'s attempt (``XADD`` then ``WAIT`` in one pipeline;
LOADING and other error replies refused, a lost connection unknown, too few replicas unknown), so a
row's outcome is the worker's outcome. The windowed publish is the same rule over a pipeline of
``XADD``\\ s and one ``WAIT`` (WAIT covers every earlier write of the connection). The consumer side
is the worker's: the group made by :func:`solutions.reader.ensure_group`, errors sorted by
:func:`solutions.connection.classify`, XPENDING/XCLAIM of idle entries for redelivery, and the dead
letters moved by the worker's Lua script (XACK, then XADD to ``<stream>:dlq`` only if the XACK
removed it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import BusyLoadingError, RedisError, ResponseError

from labs.compare.contract import Delivery, Durability, Event, Outcome, Settings
from solutions.acks import DEAD_LETTER_LUA
from solutions.connection import Client, classify, connect
from solutions.dlq import dlq_stream
from solutions.reader import ensure_group
from solutions.sender import CONFIRMED, REFUSED, Sender

log = logging.getLogger(__name__)
GROUP = "billing"
OUTCOMES = {"confirmed": Outcome.CONFIRMED, "unknown": Outcome.UNKNOWN, "refused": Outcome.REFUSED}


@dataclass(frozen=True)
class RedisSetup:
    """What the row's servers were started with (the site knows; the adapter states it)."""

    copies: int = 2  # the master and its replicas
    appendfsync: str = "everysec"
    min_replicas_to_write: int = 0


class RedisBroker:
    broker_dead_letters = False  # the worker's Lua script moves them

    def __init__(self, sentinels: list[tuple[str, int]], stream: str, settings: Settings, *, name: str = "redis",
                 setup: RedisSetup = RedisSetup(), master_name: str = "mymaster") -> None:
        self.name = name
        self.sentinels = tuple(sentinels)
        self.master_name = master_name
        self.stream = stream
        self.settings = settings
        self.setup = setup
        self._client: Client | None = None
        self._sender: Sender | None = None

    @property
    def client(self) -> Any:  # redis-py's typed replies (str | bytes | ...) for raw stream reads: decoded here
        if self._client is None:
            raise RuntimeError("RedisBroker.connect() first")
        return self._client

    async def durability(self) -> Durability:
        info = await self.client.info("server")
        wait = self.settings.wait_replicas
        always = self.setup.appendfsync == "always"
        fsync = ("before the reply to each write (appendfsync always)" if always else
                 "once a second (appendfsync everysec: up to ~1-2 s lost on a power cut)")
        fsync_ru = ("перед ответом на каждую запись (appendfsync always)" if always else
                    "раз в секунду (appendfsync everysec: при отключении питания до ~1–2 с)")
        confirm = (f"XADD on the master, then WAIT {wait}: in the memory of {wait} replica(s) (best effort: "
                   "Sentinel may still promote a replica without it)" if wait else
                   "XADD in the master's memory; replication is asynchronous (a failover may drop the tail)")
        confirm_ru = (f"XADD на мастере и WAIT {wait}: запись в памяти реплики (best effort: Sentinel может "
                      "повысить реплику без неё)" if wait else
                      "XADD в памяти мастера; репликация асинхронная (failover может потерять хвост)")
        if self.setup.min_replicas_to_write:
            confirm += f"; min-replicas-to-write {self.setup.min_replicas_to_write}"
            confirm_ru += f"; min-replicas-to-write {self.setup.min_replicas_to_write}"
        return Durability(server=f"Redis {info.get('redis_version', '?')}", copies=self.setup.copies, fsync=fsync,
                          confirm=confirm, dead_letters="the worker's Lua script (XACK + XADD <stream>:dlq)",
                          ru={"fsync": fsync_ru, "confirm": confirm_ru,
                              "dead_letters": "Lua-скрипт воркера (XACK + XADD <stream>:dlq)"})

    async def connect(self) -> None:
        self._client = connect(redis_url="", sentinels=self.sentinels, master_name=self.master_name,
                               socket_timeout_s=self.settings.publish_timeout_s)
        wait_timeout_ms = int(self.settings.publish_timeout_s * 1000)
        args = argparse.Namespace(stream=self.stream, maxlen=None, wait_replicas=self.settings.wait_replicas,
                                  wait_timeout_ms=wait_timeout_ms, resend=0)
        self._sender = Sender(self._client, args, None)
        self._dead_letter = self._client.register_script(DEAD_LETTER_LUA)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    @staticmethod
    def _fields(event: Event) -> dict[str, str]:
        return {"type": event.type, "event_id": event.event_id, "order_id": event.order_id,
                "amount": event.amount, "produced_at_ms": str(event.produced_at_ms), "seq": str(event.seq)}

    async def publish(self, event: Event) -> Outcome:
        """The worker's :meth:`Sender.attempt`: XADD (+ WAIT) in one pipeline, its outcome."""
        assert self._sender is not None, "RedisBroker.connect() first"
        return OUTCOMES[(await self._sender.attempt(self._fields(event))).status]

    async def publish_window(self, events: Sequence[Event]) -> list[Outcome]:
        """A pipeline of one XADD per event and one WAIT: the WAIT covers every XADD before it."""
        wait = self.settings.wait_replicas
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for event in events:
                    pipe.xadd(self.stream, self._fields(event))
                if wait:
                    pipe.wait(wait, int(self.settings.publish_timeout_s * 1000))
                replies = await pipe.execute(raise_on_error=False)
        except BusyLoadingError:
            return [Outcome.REFUSED] * len(events)  # as Sender: a -LOADING reply, nothing was executed
        except (RedisError, OSError):
            return [Outcome.UNKNOWN] * len(events)  # as Sender: the XADDs may have landed
        replicas = None if not wait or isinstance(replies[-1], Exception) else int(replies[-1])
        out = []
        for reply in replies[:len(events)]:
            if isinstance(reply, BusyLoadingError | ResponseError):
                out.append(OUTCOMES[REFUSED])  # OOM, READONLY, LOADING: not written
            elif not wait or (replicas is not None and replicas >= wait):
                out.append(OUTCOMES[CONFIRMED])
            else:
                out.append(Outcome.UNKNOWN)  # on the master, not known to be on a replica: re-send
        return out

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
            await self._dead_letter(keys=[self.stream, dlq_stream(self.stream)],
                                    args=[GROUP, mid, *flat, "id", mid, "error", reason, "attempts", str(attempt)])

        return Delivery(event, repr(decoded).encode(), attempt, mid, ack, retry, dead_letter)

    async def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]:
        """Idle pending entries first (XPENDING IDLE + XCLAIM), then new ones (XREADGROUP >)."""
        min_idle_ms = self.settings.redeliver_after_ms
        next_claim = 0.0
        while not stop.is_set():
            try:
                await ensure_group(self.client, self.stream, GROUP)
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
            except (RedisError, OSError) as exc:
                # NOREPLICAS: XREADGROUP writes (the PEL), and a master without a replica under
                # min-replicas-to-write refuses it until a replica is back (solutions' classify calls it fatal)
                if classify(exc) == "fatal" and not str(exc).startswith("NOREPLICAS"):
                    raise
                log.info("%s: %s, retrying", consumer, type(exc).__name__)
                await asyncio.sleep(0.2)

    async def dead_letters(self) -> list[str]:
        entries = await self.client.xrange(dlq_stream(self.stream))
        return [fields.get(b"event_id", b"?").decode() for _id, fields in entries]

    async def backlog(self) -> int:
        """Entries not yet delivered plus delivered and not acked (XINFO GROUPS lag + pending)."""
        groups = await self.client.xinfo_groups(self.stream)
        for g in groups:
            name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
            if name == GROUP:
                return int(g.get("lag") or 0) + int(g["pending"])
        return int(await self.client.xlen(self.stream))
