"""NATS JetStream with nats-py: a file stream of 3 replicas, publish acks with ``Nats-Msg-Id``
dedupe, a durable pull consumer with explicit acks, ``AckWait`` and ``MaxDeliver``; the dead
letters are published to ``<stream>-dlq`` by the consumer (JetStream has no dead-letter queue:
after MaxDeliver it only stops delivering and emits an advisory).

Publishing for throughput is nats-py's ``publish_async`` (its futures are the window, as NATS's
``PublishAsync`` with a max-pending), consuming is a long-lived pull: one pull request of
``prefetch`` messages, re-issued when half of it has arrived, and ``max_ack_pending`` equal to
what the consumers may hold (``prefetch`` each), as RabbitMQ's QoS and Redis's COUNT.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from labs.compare.contract import Delivery, Durability, Event, Outcome, Settings
from labs.launcher.nats import ensure_stream

log = logging.getLogger(__name__)
DURABLE = "billing"
PULL_EXPIRES_S = 30.0  # a pull request the server forgets after this (a 408 says so; the next one goes out)
HEARTBEAT_S = 0.5  # the server's idle heartbeat on a waiting pull request
SILENCE_S = 1.5  # no message or heartbeat for this long: the request is lost, a new one goes out
UNKNOWN_ERRORS = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
                  nats.errors.ConnectionReconnectingError, nats.errors.OutboundBufferLimitError,
                  nats.js.errors.TooManyStalledMsgsError, asyncio.TimeoutError, ConnectionError, OSError)


class NatsBroker:
    broker_dead_letters = False  # JetStream stops at MaxDeliver; the consumer publishes the dead letter

    def __init__(self, urls: list[str], stream: str, settings: Settings, *, sync_always: bool = False) -> None:
        self.name = "nats+always" if sync_always else "nats"
        self.urls = list(urls)
        self.stream = stream
        self.settings = settings
        self.sync_always = sync_always  # the servers run with jetstream { sync_interval: always } (2.10+)
        self._nc: Any = None
        self._js: Any = None

    async def durability(self) -> Durability:
        v = self._nc.connected_server_version
        version = f"{v.major}.{v.minor}.{v.patch}"
        if self.sync_always:
            fsync, fsync_ru = "before the ack (sync_interval: always)", "перед ack (sync_interval: always)"
        elif (v.major, v.minor) >= (2, 10):
            fsync = "every 2 minutes (sync_interval default; always is a setting since 2.10)"
            fsync_ru = "раз в 2 минуты (sync_interval по умолчанию; always — настройка с 2.10)"
        else:
            fsync = "every 2 minutes, not before the ack (2.9 has no setting for it)"
            fsync_ru = "раз в 2 минуты, не перед ack (в 2.9 настройки нет)"
        return Durability(server=f"NATS {version}", copies=3, fsync=fsync,
                          confirm="PubAck once a majority (2 of 3) has it; Nats-Msg-Id dedupe window 120 s",
                          dead_letters="the consumer (JetStream stops at MaxDeliver)",
                          ru={"fsync": fsync_ru,
                              "confirm": "PubAck, когда запись есть у большинства (2 из 3); окно Nats-Msg-Id 120 с",
                              "dead_letters": "консьюмер (JetStream после MaxDeliver только перестаёт доставлять)"})

    async def connect(self) -> None:
        self._nc = await nats.connect(servers=self.urls, connect_timeout=2, reconnect_time_wait=0.2,
                                      max_reconnect_attempts=-1, allow_reconnect=True,
                                      error_cb=_quiet, disconnected_cb=_nothing, reconnected_cb=_nothing)
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

    def _subject(self, event: Event) -> str:
        return f"{self.stream}.{event.order_id}"

    async def publish(self, event: Event) -> Outcome:
        """JetStream publish and wait for its PubAck; the same ``Nats-Msg-Id`` within the window is stored once."""
        try:
            await self._js.publish(self._subject(event), event.encode(),
                                   timeout=self.settings.publish_timeout_s, headers={"Nats-Msg-Id": event.event_id})
            return Outcome.CONFIRMED
        except Exception as exc:  # sorted by _outcome_of; a bug is raised there
            return _outcome_of(exc)

    async def publish_window(self, events: Sequence[Event]) -> list[Outcome]:
        """``publish_async`` of every event, then their PubAcks within the publish timeout (none: unknown)."""
        futures: list[asyncio.Future[Any] | BaseException] = []
        for event in events:
            try:
                # no wait_stall: the window is below nats-py's max pending (4000), so the semaphore never
                # waits, and a timed wait would yield per message (its flusher then writes each one alone:
                # 685/s instead of 4965/s for windows of 256, measured on 2.15.1)
                futures.append(await self._js.publish_async(
                    self._subject(event), event.encode(), headers={"Nats-Msg-Id": event.event_id}))
            except Exception as exc:  # sorted by _outcome_of below
                futures.append(exc)
        waiting = [f for f in futures if isinstance(f, asyncio.Future)]
        if waiting:
            await asyncio.wait(waiting, timeout=self.settings.publish_timeout_s)
        out = []
        for f in futures:
            if not isinstance(f, asyncio.Future):
                out.append(_outcome_of(f))
            elif not f.done():
                f.cancel()  # no PubAck in time: releases its place in the window
                out.append(Outcome.UNKNOWN)
            elif f.cancelled():
                out.append(Outcome.UNKNOWN)
            elif (error := f.exception()) is not None:
                out.append(_outcome_of(error))
            else:
                out.append(Outcome.CONFIRMED)  # a duplicate PubAck too: stored once
        return out

    def _config(self) -> ConsumerConfig:
        return ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT,
                              ack_wait=self.settings.redeliver_after_ms / 1000,
                              max_deliver=self.settings.max_attempts + 1,  # a backstop: the handler dead-letters at N
                              max_ack_pending=self.settings.prefetch * self.settings.consumers)

    async def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]:
        """A long-lived pull: a request for ``prefetch`` messages, topped up when half has arrived.

        The request is the JetStream API's ``CONSUMER.MSG.NEXT`` with an expiry and an idle heartbeat;
        the server pushes up to ``batch`` messages to our inbox as they come. Status messages (100
        heartbeat, 408 expired, 409) are not deliveries; a request whose heartbeats stopped (a killed
        server took it along) is re-issued.
        """
        inbox: asyncio.Queue[Msg] = asyncio.Queue()
        reply = self._nc.new_inbox()
        sub = await self._nc.subscribe(reply, cb=inbox.put)
        api = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{DURABLE}"
        batch = self.settings.prefetch
        owed = 0  # messages the requests still out may bring
        heard_at = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() - heard_at > SILENCE_S:
                    owed = 0  # no message and no heartbeat: the request is gone (its server was killed)
                if owed <= batch // 2:
                    request = {"batch": batch - owed, "expires": int(PULL_EXPIRES_S * 1e9),
                               "idle_heartbeat": int(HEARTBEAT_S * 1e9)}
                    try:
                        await self._nc.publish(api, json.dumps(request).encode(), reply=reply)
                    except UNKNOWN_ERRORS as exc:
                        log.info("%s: %s, retrying the pull", consumer, type(exc).__name__)
                        await asyncio.sleep(0.2)
                        continue
                    owed = batch
                    heard_at = time.monotonic()
                try:
                    msg = await asyncio.wait_for(inbox.get(), timeout=HEARTBEAT_S)
                except TimeoutError:
                    continue
                heard_at = time.monotonic()
                headers = msg.headers or {}
                if status := headers.get("Status"):  # 100 heartbeat; 408 expired, 409 the consumer changed
                    if status != "100":
                        owed = max(0, owed - int(headers.get("Nats-Pending-Messages") or owed))
                    continue
                owed -= 1
                yield self._delivery(msg)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

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


def _outcome_of(exc: BaseException) -> Outcome:
    """A publish's error: no stream leader, no quorum (503) or no answer -> unknown; another API error -> refused."""
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return Outcome.UNKNOWN  # the stream had no leader to answer (an election in progress)
    if isinstance(exc, nats.js.errors.APIError):
        return Outcome.UNKNOWN if getattr(exc, "code", None) in (503, None) else Outcome.REFUSED
    if isinstance(exc, UNKNOWN_ERRORS):
        return Outcome.UNKNOWN
    raise exc


async def _quiet(exc: Exception) -> None:
    """nats-py's error callback: a reconnect after a planned kill is expected; one line in the log."""
    log.info("nats-py: %s: %s", type(exc).__name__, exc)


async def _nothing() -> None:
    return None
