"""NATS JetStream 2.9 with nats-py: a file stream of 3 replicas, publish acks with ``Nats-Msg-Id``
dedupe, a durable pull consumer with explicit acks, ``AckWait`` and ``MaxDeliver``; the dead
letters are published to ``<stream>-dlq`` by the consumer (JetStream has no dead-letter queue:
after MaxDeliver it only stops delivering and emits an advisory)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from labs.compare.contract import Delivery, Event, Outcome, Settings
from labs.launcher.nats import ensure_stream

log = logging.getLogger(__name__)
DURABLE = "billing"
IDLE_WAIT_S = 0.5  # a waiting pull for the first message when none is there
DRAIN_WAIT_S = 0.005  # a pull that takes only what is there: the server answers at once, this ends the rest
UNKNOWN_ERRORS = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
                  nats.errors.ConnectionReconnectingError, nats.errors.OutboundBufferLimitError,
                  asyncio.TimeoutError, ConnectionError, OSError)


class NatsBroker:
    name = "nats"

    def __init__(self, urls: list[str], stream: str, settings: Settings) -> None:
        self.urls = list(urls)
        self.stream = stream
        self.settings = settings
        self._nc: Any = None
        self._js: Any = None

    def durability(self) -> str:
        return ("JetStream file stream, 3 replicas (acked once a majority has it), Nats-Msg-Id dedupe window 120 s; "
                "NATS 2.9 fsyncs every 2 minutes, not before the ack")

    async def connect(self) -> None:
        self._nc = await nats.connect(servers=self.urls, connect_timeout=2, reconnect_time_wait=0.2,
                                      max_reconnect_attempts=-1, allow_reconnect=True)
        self._js = self._nc.jetstream(timeout=self.settings.publish_timeout_s)
        await ensure_stream(self._js, self.stream)
        # The durable consumer now, before anything is published (as Redis's group and RabbitMQ's queue are
        # there before the producer starts): made by the first pull, it took up to a second on the R3
        # stream (a Raft write) while events were already waiting, and that wait showed as NATS's latency.
        await self._js.add_consumer(self.stream, self._config())

    async def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()

    async def publish(self, event: Event) -> Outcome:
        """JetStream publish and wait for its PubAck; the same ``Nats-Msg-Id`` within the window is stored once."""
        try:
            await self._js.publish(f"{self.stream}.{event.order_id}", event.encode(),
                                   timeout=self.settings.publish_timeout_s, headers={"Nats-Msg-Id": event.event_id})
            return Outcome.CONFIRMED
        except nats.js.errors.NoStreamResponseError:
            return Outcome.UNKNOWN  # the stream had no leader to answer (an election in progress)
        except nats.js.errors.APIError as exc:
            code = getattr(exc, "code", None)
            return Outcome.UNKNOWN if code in (503, None) else Outcome.REFUSED  # 503: no quorum, no answer
        except UNKNOWN_ERRORS:
            return Outcome.UNKNOWN

    def _config(self) -> ConsumerConfig:
        return ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT,
                              ack_wait=self.settings.redeliver_after_ms / 1000,
                              max_deliver=self.settings.max_attempts + 1,  # a backstop: the handler dead-letters at N
                              max_ack_pending=10_000)

    async def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]:
        """Pull what is there, up to ``prefetch`` at a time; when nothing is, wait for the first message only.

        nats-py's ``fetch(n, timeout)``, once its waiting request got a first message, waits on for the
        other ``n - 1`` until the timeout: with a trickle of messages each one would wait up to the
        timeout (500 ms measured as NATS's p50 in the throughput case). Redis's ``XREADGROUP BLOCK``
        returns as soon as one entry is there, and so does this: a waiting ``fetch(1)`` when idle, then
        ``fetch(prefetch)`` calls that only take what the server has at once (no waiting request: a
        short timeout ends one that found nothing, and the next idle wait starts).
        """
        sub = None
        idle = True
        while not stop.is_set():
            try:
                if sub is None:
                    sub = await self._js.pull_subscribe(f"{self.stream}.>", durable=DURABLE, stream=self.stream,
                                                        config=self._config())
                if idle:
                    msgs = await sub.fetch(1, timeout=IDLE_WAIT_S)
                else:
                    msgs = await sub.fetch(self.settings.prefetch, timeout=DRAIN_WAIT_S)
                idle = False
            except (TimeoutError, nats.errors.TimeoutError):
                idle = True
                continue
            except (nats.js.errors.Error, *UNKNOWN_ERRORS) as exc:
                log.info("%s: %s, retrying", consumer, type(exc).__name__)
                sub = None
                await asyncio.sleep(0.2)
                continue
            for msg in msgs:
                yield self._delivery(msg)

    def _delivery(self, msg: Msg) -> Delivery:
        meta = msg.metadata
        try:
            event: Event | None = Event.decode(msg.data)
        except (ValueError, KeyError, TypeError):
            event = None

        async def ack() -> None:
            await msg.ack()

        async def retry() -> None:
            await msg.nak()

        async def dead_letter(reason: str) -> None:
            await self._js.publish(f"{self.stream}-dlq.dead", msg.data,
                                   headers={"error": reason, "attempts": str(meta.num_delivered)})
            await msg.term()

        return Delivery(event, msg.data, int(meta.num_delivered), str(meta.sequence.stream), ack, retry, dead_letter)

    async def dead_letters(self) -> list[str]:
        sub = await self._js.pull_subscribe(f"{self.stream}-dlq.>", stream=f"{self.stream}-dlq")
        out: list[str] = []
        with contextlib.suppress(nats.errors.TimeoutError, asyncio.TimeoutError):
            while True:
                for msg in await sub.fetch(100, timeout=1):
                    out.append(Event.id_of(msg.data))
        await sub.unsubscribe()
        return out

    async def backlog(self) -> int:
        """The consumer's pending plus unacked messages; before any consumer, the stream's messages."""
        try:
            info = await self._js.consumer_info(self.stream, DURABLE)
        except nats.js.errors.NotFoundError:
            return int((await self._js.stream_info(self.stream)).state.messages)
        return int(info.num_pending) + int(info.num_ack_pending)
