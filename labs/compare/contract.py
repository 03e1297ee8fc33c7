"""The broker-neutral contract every adapter implements.

Producer side: :meth:`Broker.publish` sends one event and waits for the broker's confirmation;
it answers ``confirmed`` (the broker took responsibility), ``refused`` (the broker said no) or
``unknown`` (no answer in time, a connection lost mid-flight): the producer re-sends an unknown
or refused event with the same ``event_id`` until it is confirmed. :meth:`Broker.publish_window`
is the same contract for a window of events in flight at once, the way each vendor says to
publish for throughput (confirms gathered over the window; Redis: one ``WAIT`` per pipeline).

Consumer side: :meth:`Broker.deliveries` yields :class:`Delivery` objects, each with the delivery
attempt it is (1 for the first) and ``ack()`` / ``retry()`` / ``dead_letter()``: manual
acknowledgement, a redelivery later, or the dead letters after the last attempt. Nothing is acked
before the handler's effect is committed.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Outcome(enum.Enum):
    CONFIRMED = "confirmed"
    UNKNOWN = "unknown"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Event:
    """One billing event (the fields of ``orders`` in lab 3)."""

    event_id: str
    order_id: str
    amount: str
    produced_at_ms: int = 0
    type: str = "order.paid"
    seq: int = 0  # its place in its order's sequence (per-key order checks)

    def encode(self) -> bytes:
        return json.dumps(
            {"type": self.type, "event_id": self.event_id, "order_id": self.order_id, "amount": self.amount,
             "produced_at_ms": self.produced_at_ms, "seq": self.seq},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Event:
        data = json.loads(raw)
        return cls(str(data["event_id"]), str(data["order_id"]), str(data["amount"]),
                   int(data.get("produced_at_ms", 0)), str(data.get("type", "order.paid")), int(data.get("seq", 0)))

    @staticmethod
    def id_of(raw: bytes) -> str:
        """The ``event_id`` of a body, or ``?`` for one that does not decode (a dead letter's identity)."""
        try:
            return str(json.loads(raw)["event_id"])
        except (ValueError, KeyError, TypeError):
            return "?"

    def stamped(self) -> Event:
        return Event(self.event_id, self.order_id, self.amount, int(time.time() * 1000), self.type, self.seq)


@dataclass
class Delivery:
    """One delivery of an event to a consumer: which attempt it is and what to do when done."""

    event: Event | None  # None: a body that does not decode (a poison message)
    raw: bytes
    attempt: int
    msg_id: str
    ack: Callable[[], Awaitable[None]]
    retry: Callable[[], Awaitable[None]]
    dead_letter: Callable[[str], Awaitable[None]]
    received_at: float = field(default_factory=time.time)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What every adapter is set to, so that rows differ by broker, not by configuration."""

    max_attempts: int = 3  # deliveries before the dead letters
    prefetch: int = 16  # deliveries in hand per consumer (Redis: COUNT; RabbitMQ: QoS; NATS: pull batch)
    consumers: int = 2  # consumers of one queue (NATS: max_ack_pending = prefetch x consumers, the same in hand)
    redeliver_after_ms: int = 1000  # an unacked delivery comes back after this (Redis min idle; NATS AckWait)
    publish_timeout_s: float = 2.0  # no confirmation within it: the outcome is unknown
    wait_replicas: int = 0  # Redis only: WAIT N after each XADD (0: none)

    def __post_init__(self) -> None:
        if self.max_attempts < 2 or self.prefetch < 1 or self.redeliver_after_ms < 100 or self.consumers < 1:
            raise ValueError(f"bad compare settings: {self}")


@dataclass(frozen=True, kw_only=True)
class Durability:
    """What a row's confirm means, stated on every figure: the server that ran, how many copies the
    queue keeps, when the data reaches the disk, and what has happened when the producer hears "yes"."""

    server: str  # "Redis 7.0.15", "RabbitMQ 3.10.8", "NATS 2.9.10": read from the running server
    copies: int  # copies of each message the queue keeps (leader and replicas)
    fsync: str  # when a confirmed message is on disk
    confirm: str  # what the confirm means
    dead_letters: str  # who moves a poison message to the dead letters
    ru: dict[str, str] = field(default_factory=dict)  # fsync, confirm, dead_letters in Russian (notebook 11)

    def text(self) -> str:
        return (f"{self.server}; {self.copies} copies; fsync: {self.fsync}; confirm: {self.confirm}; "
                f"dead letters: {self.dead_letters}")


class Broker(Protocol):
    """One queue (stream) of one broker, as seen by a producer or a consumer."""

    name: str  # the row label: "redis", "redis+WAIT", "rabbitmq", "nats"
    # True when the broker itself moves a message to the dead letters after its delivery limit; the
    # consumer then only asks for redeliveries (RabbitMQ's x-delivery-limit + DLX)
    broker_dead_letters: bool

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def publish(self, event: Event) -> Outcome: ...

    async def publish_window(self, events: Sequence[Event]) -> list[Outcome]:
        """Every event of ``events`` in flight at once; one outcome each, in order (same rules as publish)."""
        ...

    def deliveries(self, consumer: str, stop: asyncio.Event) -> AsyncIterator[Delivery]: ...

    async def dead_letters(self) -> list[str]: ...

    async def backlog(self) -> int: ...

    async def durability(self) -> Durability:
        """The row's durability (reads the server's version: after :meth:`connect`)."""
        ...


