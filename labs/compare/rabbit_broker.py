"""RabbitMQ 3.10 with aio-pika: a quorum queue (Raft, 3 replicas), publisher confirms, manual acks
with a prefetch (QoS), ``x-delivery-limit`` and a dead-letter exchange (at-least-once).

A connection lost mid-publish is an unknown outcome; the next call connects to the next node of
the list (the cluster's nodes all serve the queue, whichever holds its leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from labs.compare.contract import Delivery, Event, Outcome, Settings
from labs.launcher.rabbitmq import declare_on

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0
BROKEN = (aiormq.exceptions.AMQPError, ConnectionError, OSError, asyncio.TimeoutError, RuntimeError)


class RabbitBroker:
    name = "rabbitmq"

    def __init__(self, urls: list[str], queue: str, settings: Settings) -> None:
        self.urls = list(urls)
        self.queue = queue
        self.settings = settings
        self._turn = 0
        self._conn: Any = None
        self._channel: Any = None

    def durability(self) -> str:
        return (f"quorum queue, 3 replicas (Raft: confirmed once a majority has it, fsync before the confirm), "
                f"publisher confirms, persistent messages, x-delivery-limit {self.settings.max_attempts}, DLX")

    async def _open(self) -> AbstractConnection:
        """A connection to the next node that answers."""
        last: BaseException | None = None
        for _ in range(len(self.urls)):
            url = self.urls[self._turn % len(self.urls)]
            self._turn += 1
            try:
                return await aio_pika.connect(url, timeout=CONNECT_TIMEOUT_S)
            except BROKEN as exc:
                last = exc
        raise ConnectionError(f"no RabbitMQ node answers: {last}")

    async def connect(self) -> None:
        self._conn = await self._open()
        self._channel = await self._conn.channel(publisher_confirms=True)
        await declare_on(self._channel, self.queue, self.settings.max_attempts)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(*BROKEN):
                await self._conn.close()

    async def publish(self, event: Event) -> Outcome:
        """basic.publish (persistent) and wait for the confirm: ack -> confirmed, nack -> refused, none -> unknown."""
        try:
            if self._channel is None or self._channel.is_closed:
                await self.close()
                await self.connect()
            message = aio_pika.Message(event.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                       message_id=event.event_id)
            await self._channel.default_exchange.publish(message, routing_key=self.queue,
                                                         timeout=self.settings.publish_timeout_s)
            return Outcome.CONFIRMED
        except aiormq.exceptions.DeliveryError:
            # A nack. After a leader kill RabbitMQ 3.10 nacks every later publish on a channel that was open
            # (or opened) while the queue had no leader, for as long as the channel lives (100 of 100 over 10 s,
            # measured); a new channel reaches the new leader. So the next attempt opens a new one.
            self._channel = None
            return Outcome.REFUSED
        except BROKEN:
            self._channel = None
            return Outcome.UNKNOWN

    async def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]:
        while not stop.is_set():
            inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
            conn = None
            try:
                conn = await self._open()
                channel = await conn.channel()
                await channel.set_qos(prefetch_count=self.settings.prefetch)
                queue = await declare_on(channel, self.queue, self.settings.max_attempts)
                await queue.consume(inbox.put, no_ack=False, consumer_tag=consumer)
                while not stop.is_set() and not conn.is_closed and not channel.is_closed:
                    try:
                        message = await asyncio.wait_for(inbox.get(), timeout=0.3)
                    except TimeoutError:
                        continue
                    yield self._delivery(message)
            except BROKEN as exc:
                log.info("%s: %s, reconnecting", consumer, type(exc).__name__)
                await asyncio.sleep(0.2)
            finally:
                if conn is not None:
                    with contextlib.suppress(*BROKEN):
                        await conn.close()

    def _delivery(self, message: AbstractIncomingMessage) -> Delivery:
        count = int(str((message.headers or {}).get("x-delivery-count") or 0))  # returns so far (quorum queues)
        try:
            event: Event | None = Event.decode(message.body)
        except (ValueError, KeyError, TypeError):
            event = None

        async def ack() -> None:
            await message.ack()

        async def retry() -> None:
            await message.nack(requeue=True)  # back to the queue; its delivery count grows

        async def dead_letter(reason: str) -> None:
            await message.nack(requeue=False)  # the queue's DLX routes it to <queue>.dlq

        return Delivery(event, message.body, count + 1, str(message.delivery_tag), ack, retry, dead_letter)

    async def dead_letters(self) -> list[str]:
        try:
            channel = await self._conn.channel()
        except BROKEN:  # the node this connection went to was killed: the next one
            await self.close()
            await self.connect()
            channel = await self._conn.channel()
        dlq = await channel.declare_queue(f"{self.queue}.dlq", durable=True, arguments={"x-queue-type": "quorum"})
        out: list[str] = []
        while (message := await dlq.get(no_ack=False, fail=False, timeout=5)) is not None:
            out.append(Event.id_of(message.body))
        await channel.close()  # unacked: they stay in the dead-letter queue
        return out

    async def backlog(self) -> int:
        if self._channel is None or self._channel.is_closed:
            await self.connect()
        queue = await self._channel.declare_queue(self.queue, passive=True)
        return int(queue.declaration_result.message_count or 0)
