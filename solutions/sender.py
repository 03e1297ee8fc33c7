"""One stream's sender: ``XADD`` (+ ``WAIT``) per attempt, re-sends, and the log of every attempt.

:class:`Sender` is what :class:`~solutions.producer.Producer` runs per stream: one for a plain
stream (by URL or through Sentinel), one per shard of a stream on Redis Cluster. The statuses,
the re-send rule and the ``--log`` format are described in :mod:`solutions.producer`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass, fields
from typing import IO, Protocol

from redis.exceptions import BusyLoadingError, RedisError, ResponseError
from redis.typing import EncodableT, FieldT

from solutions.connection import Backoff, Client, Streak, describe
from solutions.event_ids import new_event_id

log = logging.getLogger("solutions.producer")


CONFIRMED, UNKNOWN, REFUSED = "confirmed", "unknown", "refused"


@dataclass
class Tally:
    """Events by outcome (each event counted once, by its best attempt), and re-sent attempts."""

    attempted: int = 0
    confirmed: int = 0
    unknown: int = 0
    refused: int = 0
    resent: int = 0

    def add(self, other: Tally) -> None:
        for f in fields(Tally):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: its status, the id and replica count Redis gave, and why if not confirmed."""

    status: str
    msg_id: str | None = None
    replicas: int | None = None
    error: str | None = None


def make_event(order_count: int) -> dict[str, str]:
    """One ``order.paid`` event with a fresh, time-ordered ``event_id`` (:mod:`solutions.event_ids`)."""
    cents = random.randint(100, 99_999)
    return {
        "type": "order.paid",
        "order_id": f"order-{random.randrange(order_count)}",
        "amount": f"{cents // 100}.{cents % 100:02d}",
        "event_id": new_event_id(),
        "produced_at_ms": str(int(time.time() * 1000)),
    }


class SendOptions(Protocol):
    """What a :class:`Sender` reads of its options (:class:`~solutions.producer_options.ProducerOptions` has it)."""

    @property
    def stream(self) -> str: ...
    @property
    def maxlen(self) -> int | None: ...
    @property
    def wait_replicas(self) -> int: ...
    @property
    def wait_timeout_ms(self) -> int: ...
    @property
    def resend(self) -> int: ...


class Sender:
    """Sends events to one stream (``options.stream``) with ``XADD`` (+ ``WAIT``) and logs each outcome."""

    def __init__(self, client: Client, options: SendOptions, out: IO[str] | None) -> None:
        self.client = client
        self.options = options
        self.out = out
        self.tally = Tally()
        self.backoff = Backoff(base_s=0.05, cap_s=1.0)
        self.streak = Streak(log, "XADD")

    async def send(self, event: dict[str, str], stop: asyncio.Event | None = None) -> str:
        """Send one event: a first attempt, then up to ``--resend`` re-sends until one is confirmed.

        Returns the event's outcome (``confirmed``, ``refused`` when every attempt was refused,
        else ``unknown``). Every attempt is logged.
        """
        statuses: list[str] = []
        for attempt in range(1, self.options.resend + 2):
            if attempt > 1:
                if stop is not None and stop.is_set():
                    break
                self.tally.resent += 1
            outcome = await self.attempt(event)
            statuses.append(outcome.status)
            self._log(event, attempt, outcome)
            if outcome.status == CONFIRMED:
                self.backoff.reset()
                break
            await self.backoff.sleep()
        final = CONFIRMED if CONFIRMED in statuses else REFUSED if set(statuses) == {REFUSED} else UNKNOWN
        self.tally.attempted += 1
        setattr(self.tally, final, getattr(self.tally, final) + 1)
        return final

    async def attempt(self, event: dict[str, str]) -> Outcome:
        """``XADD stream [MAXLEN ~ n] * fields`` then, if asked, ``WAIT n timeout``: one pipeline, one outcome."""
        a = self.options
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                fields: dict[FieldT, EncodableT] = {name: value for name, value in event.items()}  # redis-py's types
                pipe.xadd(a.stream, fields, maxlen=a.maxlen, approximate=True)
                if a.wait_replicas:
                    pipe.wait(a.wait_replicas, a.wait_timeout_ms)
                replies = await pipe.execute(raise_on_error=False)
        except BusyLoadingError as exc:  # a -LOADING reply: the XADD was not executed
            self.streak.failed(exc)
            return Outcome(REFUSED, error=describe(exc))
        except (RedisError, OSError) as exc:  # connection lost, timeout, no master: the XADD may have landed
            self.streak.failed(exc)  # each attempt's outcome is in --log; stderr gets one line per streak
            return Outcome(UNKNOWN, error=describe(exc))
        if isinstance(replies[0], ResponseError):  # OOM, READONLY ...: Redis did not write the entry
            self.streak.failed(replies[0])
            return Outcome(REFUSED, error=describe(replies[0]))
        self.streak.recovered()
        raw_id = replies[0]
        msg_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        if not a.wait_replicas:
            return Outcome(CONFIRMED, msg_id)
        replicas = None if isinstance(replies[1], Exception) else int(replies[1])
        if replicas is not None and replicas >= a.wait_replicas:
            return Outcome(CONFIRMED, msg_id, replicas)
        why = describe(replies[1]) if replicas is None else f"WAIT: {replicas} of {a.wait_replicas} replicas acked"
        return Outcome(UNKNOWN, msg_id, replicas, why)

    def _log(self, event: dict[str, str], attempt: int, outcome: Outcome) -> None:
        if self.out is None:
            return
        record = {
            "event_id": event["event_id"],
            "attempt": attempt,
            "status": outcome.status,
            "msg_id": outcome.msg_id,
            "replicas": outcome.replicas,
            "error": outcome.error,
            "time": time.time(),
            "order_id": event["order_id"],
            "amount": event["amount"],
        }
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
