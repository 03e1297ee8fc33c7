"""The one producer: each event published with confirm, an unknown or refused one re-sent with the
same ``event_id`` until confirmed (or a deadline), optionally at a fixed rate. Its log is the record
"confirmed" is judged by; the consumers never write it.

:func:`produce` keeps one event in flight: it measures «задержка подтверждённой публикации» (the
confirmed-publish round trip), not throughput. :func:`produce_windowed` keeps a window of events in
flight, as each vendor says to publish for throughput, with the same contract: every event of a
window gets its outcome, and the unknown or refused ones go into the next window again, same
``event_id``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from labs.compare.contract import Broker, Event, Outcome
from labs.polling import poll_value_async, seconds_left

RESEND_PAUSE_S = 0.1


@dataclass
class Attempt:
    event_id: str
    attempt: int
    outcome: str
    at: float  # unix seconds
    took_s: float


@dataclass
class ProduceLog:
    attempts: list[Attempt] = field(default_factory=list)
    confirmed: dict[str, float] = field(default_factory=dict)  # event_id -> unix time of its confirm
    gave_up: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(1 for a in self.attempts if a.outcome == outcome.value)


async def produce(broker: Broker, events: Sequence[Event], *, rate_per_s: float = 0.0,
                  resend_deadline_s: float = 60.0, deadline_s: float = 180.0) -> ProduceLog:
    """Publish ``events`` in order (at ``rate_per_s`` when > 0, else as fast as confirms come back).

    An event is re-sent until confirmed or ``resend_deadline_s`` passes; the whole run stops trying
    after ``deadline_s``: the events left are logged as given up (a broker that refuses for good
    ends the case with figures, not a hang).
    """
    log = ProduceLog()
    started = time.monotonic()
    run_deadline = started + deadline_s
    for i, event in enumerate(events):
        if time.monotonic() > run_deadline:
            log.gave_up.append(event.event_id)
            continue
        if rate_per_s > 0:
            await asyncio.sleep(max(0.0, started + i / rate_per_s - time.monotonic()))
        event = event.stamped()
        timeout_s = min(resend_deadline_s, seconds_left(run_deadline))
        if not await _publish_until_confirmed(broker, event, log, timeout_s):
            log.gave_up.append(event.event_id)
    log.elapsed_s = time.monotonic() - started
    return log


async def _publish_until_confirmed(broker: Broker, event: Event, log: ProduceLog, timeout_s: float) -> bool:
    """Publish ``event``, and again (same ``event_id``) every :data:`RESEND_PAUSE_S` until it is
    confirmed or ``timeout_s`` passes, each attempt logged; whether it was confirmed."""
    numbers = itertools.count(1)

    async def publish() -> Outcome:
        t0 = time.monotonic()
        outcome = await broker.publish(event)
        log.attempts.append(Attempt(event.event_id, next(numbers), outcome.value, time.time(), time.monotonic() - t0))
        return outcome

    if await poll_value_async(publish, lambda o: o is Outcome.CONFIRMED, timeout_s, RESEND_PAUSE_S) \
            is not Outcome.CONFIRMED:
        return False
    log.confirmed[event.event_id] = time.time()
    return True


async def produce_windowed(broker: Broker, events: Sequence[Event], *, window: int, rate_per_s: float = 0.0,
                           resend_deadline_s: float = 60.0, deadline_s: float = 180.0) -> ProduceLog:
    """Publish ``events`` ``window`` at a time (:meth:`Broker.publish_window`), re-sending the
    unconfirmed ones of a window with the next one until each is confirmed or its deadline passes.

    With ``rate_per_s`` a window goes out when the offered rate says its first new event is due (an
    open loop: a slow confirm delays the next window, the schedule does not move)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, not {window}")
    log = ProduceLog()
    started = time.monotonic()
    attempts: dict[str, int] = {}
    first_at: dict[str, float] = {}
    todo = list(events)
    retry: list[Event] = []

    async def send_window() -> int:
        """One window out (the re-sends first), its outcomes logged; how many events are left to send."""
        if rate_per_s > 0 and todo and not retry:
            await asyncio.sleep(max(0.0, started + (len(events) - len(todo)) / rate_per_s - time.monotonic()))
        fresh = [e.stamped() for e in todo[:window - len(retry)]] if len(retry) < window else []
        del todo[:len(fresh)]
        batch = retry[:window] + fresh
        del retry[:window]
        if not batch:
            await asyncio.sleep(RESEND_PAUSE_S)
            return len(todo) + len(retry)
        t0 = time.monotonic()
        outcomes = await broker.publish_window(batch)
        took_s, now = time.monotonic() - t0, time.time()
        unconfirmed = []
        for event, outcome in zip(batch, outcomes, strict=True):
            attempts[event.event_id] = attempts.get(event.event_id, 0) + 1
            first_at.setdefault(event.event_id, t0)
            log.attempts.append(Attempt(event.event_id, attempts[event.event_id], outcome.value, now, took_s))
            if outcome is Outcome.CONFIRMED:
                log.confirmed[event.event_id] = now
            elif time.monotonic() - first_at[event.event_id] > resend_deadline_s:
                log.gave_up.append(event.event_id)
            else:
                unconfirmed.append(event)
        if unconfirmed:
            retry[:0] = unconfirmed
            await asyncio.sleep(RESEND_PAUSE_S)
        return len(todo) + len(retry)

    if todo:  # windows go out back to back until none is left or the run's deadline passes
        await poll_value_async(send_window, lambda left: left == 0, deadline_s, poll_s=0.0)
    log.gave_up += [e.event_id for e in [*retry, *todo]]  # what the deadline left unsent
    log.elapsed_s = time.monotonic() - started
    return log


def make_events(prefix: str, n: int, *, orders: int = 0, poison_at: int = -1) -> list[Event]:
    """``n`` events; with ``orders`` they cycle over that many order ids, each with its own ``seq``."""
    from labs.compare.consumer import POISON_AMOUNT

    events = []
    for i in range(n):
        order = f"o{i % orders}" if orders else f"o{i}"
        amount = POISON_AMOUNT if i == poison_at else f"{10 + i % 90}.00"
        events.append(Event(f"{prefix}-{i}", f"{prefix}-{order}", amount, seq=i // orders if orders else 0))
    return events
