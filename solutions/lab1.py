"""Lab 1 of module 1: a Redis Streams worker with a rescuer.

Three roles share one stream and one consumer group:

* the producer adds an ``order.paid`` event every 100 ms (``XADD ... MAXLEN ~ 1000``), with a
  counter in the fields so that every event can be traced from send to processing;
* the consumers ``billing-1`` and ``billing-2`` read with ``XREADGROUP ... BLOCK 2000`` and
  acknowledge (``XACK``) only what they processed; a failed message stays in the PEL;
* the rescuer («спасатель») runs ``XAUTOCLAIM`` every 5 s with a min idle of 3 s, re-processes
  what it took over and writes a journal entry "who took whose message".

The lab runner (``make lab-1``) drives these functions from threads and supplies ``handle``,
the simulated work that fails on every 5th message. Only the functions are the student's
work; loops, timing and checks belong to the runner. ``solutions/lab1.py`` is the reference
answer; ``labs/lab1/starter.py`` is derived from it (``python -m labs.kit --write``), with
each marked solution part replaced by a stub that states the task.

The client passed in is a synchronous ``redis.Redis`` with ``decode_responses=True`` and a
socket timeout longer than ``block_ms`` (otherwise an idle ``BLOCK`` reads as a dead socket).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

log = logging.getLogger(__name__)

STREAM = "orders"
GROUP = "billing"
CONSUMERS = ("billing-1", "billing-2")
RESCUER = "rescuer"

Message = tuple[str, dict[str, str]]
"""One stream entry as a decoded client returns it: ``(msg_id, fields)``."""
ReadReply = list[tuple[str, list[Message]]]
"""The ``XREADGROUP`` reply (RESP2, decoded): ``[(stream, [(msg_id, fields), ...])]``."""

Handler = Callable[[str, Mapping[str, str], str], None]
"""``handle(msg_id, fields, worker)``: does the work for one message; raises when the work failed."""


@dataclass(frozen=True)
class JournalEntry:
    """One line of the rescuer's journal: ``to_consumer`` took ``msg_id`` from ``from_consumer``.

    ``deliveries`` is the delivery count Redis keeps for the message *after* the claim
    (XAUTOCLAIM adds one: the count XPENDING showed for the old owner, plus 1). ``ok`` says
    whether the rescuer's own attempt succeeded (and was acked). When the claimed id was not
    among the XPENDING rows read just before (the PEL changed between the two calls),
    ``from_consumer`` is ``"?"``: XAUTOCLAIM itself never says whose a message was.
    """

    msg_id: str
    from_consumer: str
    to_consumer: str
    deliveries: int
    ok: bool


def order_fields(counter: int) -> dict[str, str]:
    """The event body: an ``order.paid`` with a running ``counter`` (the thread to trace it by)."""
    return {
        "type": "order.paid",
        "order_id": f"o-{counter}",
        "amount": f"{counter % 97 + 1}.50",
        "counter": str(counter),
    }


def ensure_group(client: redis.Redis, stream: str, group: str) -> bool:
    """``XGROUP CREATE stream group 0 MKSTREAM`` (redis-py: ``client.xgroup_create(stream, group,
    id="0", mkstream=True)``). Returns True when it created the group, False when the group
    already existed (Redis answered ``BUSYGROUP``: not an error here); any other error is raised."""
    # region solution: create the group from id 0 with MKSTREAM; BUSYGROUP means it already exists
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        return False
    return True
    # endregion


def produce_one(client: redis.Redis, stream: str, counter: int, *, maxlen: int = 1000) -> str:
    """``XADD stream MAXLEN ~ maxlen * ...order_fields(counter)``; returns the new message id.

    redis-py: ``client.xadd(stream, fields, maxlen=maxlen, approximate=True)`` (``approximate``
    is the ``~``; True is redis-py's default, spelled out here on purpose)."""
    # region solution: XADD the order_fields(counter) with an approximate MAXLEN and return the id Redis gave
    fields: dict[Any, Any] = order_fields(counter)
    return str(client.xadd(stream, fields, maxlen=maxlen, approximate=True))
    # endregion


def consume_once(
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    handle: Handler,
    *,
    block_ms: int = 2000,
    count: int = 10,
) -> int:
    """One ``XREADGROUP GROUP group consumer COUNT count BLOCK block_ms STREAMS stream >`` round.

    redis-py: ``client.xreadgroup(group, consumer, {stream: ">"}, count=count, block=block_ms)``
    returns ``[(stream, [(msg_id, fields), ...])]``, or an empty list when ``BLOCK`` timed out
    (normal: return 0). Each message goes to ``handle(msg_id, fields, consumer)`` (``worker`` is
    this consumer's own name); ``client.xack(stream, group, msg_id)`` follows only when
    ``handle`` returned. A message whose handling raised is left in the PEL, where the rescuer
    finds it. Returns how many messages were processed and acknowledged in this round.
    """
    # region solution: XREADGROUP new messages (">") with BLOCK; handle each, XACK only after handle succeeded
    reply = cast(ReadReply, client.xreadgroup(group, consumer, {stream: ">"}, count=count, block=block_ms))
    done = 0
    for _name, messages in reply or []:
        for msg_id, fields in messages:
            try:
                handle(msg_id, fields, consumer)
            except Exception as exc:
                log.info("%s failed on %s (%s): no XACK, it stays in the PEL", consumer, msg_id, exc)
                continue
            client.xack(stream, group, msg_id)
            done += 1
    return done
    # endregion


def rescue_once(
    client: redis.Redis,
    stream: str,
    group: str,
    rescuer: str,
    handle: Handler,
    *,
    min_idle_ms: int = 3000,
    count: int = 100,
    cursor: str = "0-0",
) -> tuple[str, list[JournalEntry]]:
    """One rescuer round: ``XPENDING`` (who holds what), ``XAUTOCLAIM``, re-process, ``XACK``.

    ``XAUTOCLAIM stream group rescuer min_idle_ms cursor COUNT count`` moves the messages idle
    for at least ``min_idle_ms`` to ``rescuer``. It does not say whose they were, so the owners
    are read first with ``XPENDING stream group IDLE min_idle_ms//2 cursor + count`` (half, as
    an integer: an entry that crosses min idle between the two calls still has its owner).
    redis-py: ``client.xpending_range(stream, group, min=cursor, max="+", count=count,
    idle=min_idle_ms // 2)`` gives dicts with ``message_id``, ``consumer`` and
    ``times_delivered``; ``client.xautoclaim(stream, group, rescuer, min_idle_time=min_idle_ms,
    start_id=cursor, count=count)`` gives ``[next_cursor, [(msg_id, fields), ...], [deleted_id,
    ...]]`` on Redis 7. Each claimed message goes to ``handle(msg_id, fields, rescuer)`` and is
    acked only if that returned; a message whose handling raised again stays pending (journal
    it with ``ok=False``; a later round retries it once it is idle again). A deleted id (trimmed
    from the stream while pending) has already left the PEL: log it, nothing to handle or
    journal. Returns the cursor for the next round (``0-0`` once the PEL was scanned to its end)
    and the journal, one :class:`JournalEntry` per claimed message.
    """
    # region solution: owners via XPENDING IDLE, then XAUTOCLAIM; handle + XACK each; journal who took whose
    pending: list[dict[str, Any]] = client.xpending_range(
        stream, group, min=cursor, max="+", count=count, idle=min_idle_ms // 2
    )
    owners = {str(p["message_id"]): (str(p["consumer"]), int(p["times_delivered"])) for p in pending}
    reply: list[Any] = client.xautoclaim(
        stream, group, rescuer, min_idle_time=min_idle_ms, start_id=cursor, count=count
    )
    next_cursor, claimed = str(reply[0]), cast(list[Message], reply[1])
    for deleted_id in reply[2] if len(reply) > 2 else []:
        log.warning("%s was trimmed from %s while pending; XAUTOCLAIM dropped it", deleted_id, stream)
    journal: list[JournalEntry] = []
    for msg_id, fields in claimed:
        owner, delivered = owners.get(msg_id, ("?", 0))
        try:
            handle(msg_id, fields, rescuer)
        except Exception as exc:
            log.warning("%s took %s from %s but failed again (%s)", rescuer, msg_id, owner, exc)
            journal.append(JournalEntry(msg_id, owner, rescuer, delivered + 1, ok=False))
            continue
        client.xack(stream, group, msg_id)
        log.info("%s took %s from %s and processed it (delivery %s)", rescuer, msg_id, owner, delivered + 1)
        journal.append(JournalEntry(msg_id, owner, rescuer, delivered + 1, ok=True))
    return next_cursor, journal
    # endregion
