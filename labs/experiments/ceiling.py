"""The ceiling: the fastest plain ``redis.asyncio`` consumer, and the pre-produced events.

The ceiling reads with XREADGROUP COUNT 100, does nothing per message, and acks each batch
with one XACK carrying all its ids. Any real worker does at least this much Redis work per
message, so its throughput divided by this one is the fraction of the ceiling it reaches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from solutions.event_ids import new_event_id

PRODUCE_BATCH = 1000
CEILING_COUNT = 100
BLOCK_MS = 1000


def order_fields(i: int) -> dict[FieldT, EncodableT]:
    """The billing message shape from DESIGN.md, with a unique, time-ordered event_id like
    billing-producer's (:func:`solutions.event_ids.new_event_id`)."""
    return {
        "type": "order.paid",
        "order_id": f"o-{i % 1000}",
        "amount": f"{(i % 500) + 1}.50",
        "event_id": new_event_id(),
    }


def produce(url: str, stream: str, n: int, *groups: str,
            fields: Callable[[int], dict[FieldT, EncodableT]] = order_fields) -> None:
    """Put ``n`` events (``fields(i)``, the billing shape by default) into a fresh ``stream`` with
    pipelined XADDs, and create each of ``groups`` (``billing`` when none is named) at 0."""
    with redis.Redis.from_url(url) as client:
        client.delete(stream)
        for start in range(0, n, PRODUCE_BATCH):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + PRODUCE_BATCH)):
                pipe.xadd(stream, fields(i))
            pipe.execute()
        for group in groups or ("billing",):
            client.xgroup_create(stream, group, id="0")


async def ceiling(url: str, stream: str, n: int, group: str = "billing") -> float:
    """Consume ``n`` pre-produced events the fastest simple way; returns messages per second."""
    client = aioredis.Redis.from_url(url)
    done = 0
    started = time.perf_counter()
    try:
        while done < n:
            reply: Any = await client.xreadgroup(group, "ceiling", {stream: ">"}, count=CEILING_COUNT, block=BLOCK_MS)
            if not reply:
                raise RuntimeError(f"ceiling: the stream ran dry after {done} of {n} messages")
            ids = [msg_id for msg_id, _fields in reply[0][1]]
            for _msg_id, _fields in reply[0][1]:
                pass  # the no-op handler
            await client.xack(stream, group, *ids)
            done += len(ids)
    finally:
        await client.aclose()
    return n / (time.perf_counter() - started)
