"""RabbitMQ 3.10 with aio-pika: a quorum queue (Raft, 3 replicas), publisher confirms, manual acks
with a prefetch (QoS), ``x-delivery-limit`` and a dead-letter exchange (at-least-once).

The broker handles a poison message itself: the queue's ``x-delivery-limit`` is ``max_attempts - 1``
(RabbitMQ 3.10 dead-letters a message once it has been *returned* more times than the limit, so
``max_attempts`` deliveries in all), and the consumer only ever requeues: the dead letter is
RabbitMQ's move, not the consumer's. The windowed publish gathers the confirms of a window of
publishes on one confirm channel (RabbitMQ's tutorial 7, "handling publisher confirms asynchronously").

A connection lost mid-publish is an unknown outcome; the next call connects to the next node of
the list (the cluster's nodes all serve the queue, whichever holds its leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from labs.compare.contract import Delivery, Durability, Event, Outcome, Settings
from labs.launcher.rabbitmq import declare_on

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0
BROKEN = (aiormq.exceptions.AMQPError, ConnectionError, OSError, asyncio.TimeoutError, RuntimeError)


class RabbitBroker:
    name = "rabbitmq"
    broker_dead_letters = True  # x-delivery-limit + DLX: the consumer only requeues

    def __init__(self, urls: list[str], queue: str, settings: Settings) -> None:
        self.urls = list(urls)
        self.queue = queue
        self.settings = settings
        self._turn = 0
        self._conn: Any = None
        self._channel: Any = None

    @property
    def delivery_limit(self) -> int:
        """RabbitMQ dead-letters when a message's returns exceed the limit: N - 1 gives N deliveries."""
        return self.settings.max_attempts - 1

    async def durability(self) -> Durability:
        props = self._conn.transport.connection.server_properties if self._conn and self._conn.transport else {}
        version = props.get("version", "?")
        version = version.decode() if isinstance(version, bytes) else str(version)
        return Durability(server=f"RabbitMQ {version}", copies=3,
                          fsync="before the confirm (the Ra WAL fdatasyncs on each member before it answers)",
                          confirm="publisher confirm once a majority (2 of 3) has written and fsynced it",
                          dead_letters=f"the broker: x-delivery-limit {self.delivery_limit} + DLX "
                                       f"({self.settings.max_attempts} deliveries, the consumer only requeues)",
                          ru={"fsync": "перед подтверждением (WAL Ra делает fdatasync на каждом узле)",
                              "confirm": "publisher confirm, когда большинство (2 из 3) записало и сбросило на диск",
                              "dead_letters": f"сам брокер: x-delivery-limit {self.delivery_limit} + DLX "
                                              f"({self.settings.max_attempts} доставки, консьюмер только возвращает)"})

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
        await declare_on(self._channel, self.queue, self.delivery_limit)

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
            # A nack. After a leader kill RabbitMQ 3.10 nacks every later publish on a channel opened while the
            # queue had no leader, for as long as the channel lives (116 of 116 over 12 s, measured; a channel
            # open across the kill kept getting acks); a new channel reaches the new leader, so the next
            # attempt opens a new one.
            self._channel = None
            return Outcome.REFUSED
        except BROKEN:
            self._channel = None
            return Outcome.UNKNOWN

    async def publish_window(self, events: Sequence[Event]) -> list[Outcome]:
        """Every event published at once on the confirm channel, their confirms gathered."""
        if not events:
            return []
        if self._channel is None or self._channel.is_closed:
            try:
                await self.close()
                await self.connect()
            except BROKEN:
                self._channel = None
                return [Outcome.UNKNOWN] * len(events)
        channel = self._channel
        tasks = [asyncio.ensure_future(self._publish_on(channel, e)) for e in events]
        # one deadline for the window, not a timed wait per publish (each would yield on its own)
        done, late = await asyncio.wait(tasks, timeout=self.settings.publish_timeout_s)
        for task in late:
            task.cancel()
        results = [t.result() if t in done and not t.cancelled() else Outcome.UNKNOWN for t in tasks]
        if any(r is not Outcome.CONFIRMED for r in results):
            self._channel = None  # a nack or a broken channel: the next window opens a new one (see publish)
        return results

    async def _publish_on(self, channel: Any, event: Event) -> Outcome:
        message = aio_pika.Message(event.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                   message_id=event.event_id)
        try:
            await channel.default_exchange.publish(message, routing_key=self.queue)
            return Outcome.CONFIRMED
        except aiormq.exceptions.DeliveryError:
            return Outcome.REFUSED
        except BROKEN:
            return Outcome.UNKNOWN

    async def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]:
        while not stop.is_set():
            inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
            conn = None
            try:
                conn = await self._open()
                channel = await conn.channel()
                await channel.set_qos(prefetch_count=self.settings.prefetch)
                queue = await declare_on(channel, self.queue, self.delivery_limit)
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

        async def dead_letter(reason: str) -> None:  # an undecodable body only: the limit is the broker's
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
