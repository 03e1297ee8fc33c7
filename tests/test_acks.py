"""Acks: the one owner of XACK (plain, with done markers, and the dead-letter move), on real Redis."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio as aioredis

from solutions.acks import DONE, Acks
from solutions.messages import Delivery, flat_fields


def pending_for(client: redis.Redis, stream: str, n: int) -> list[str]:
    """``n`` events added to ``stream`` and read (not acked) by consumer ``c`` of group ``g``."""
    client.xgroup_create(stream, "g", id="0", mkstream=True)
    for i in range(n):
        client.xadd(stream, {"order_id": f"o-{i}", "amount": "1.00", "event_id": f"e-{i}"})
    reply = client.xreadgroup("g", "c", {stream: ">"}, count=n)
    return [msg_id for msg_id, _ in reply[0][1]]


def test_ack_and_ack_marking_done(redis_url: str, key_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = f"{key_prefix}orders"
    ids = pending_for(client, stream, 4)
    keys = [f"{key_prefix}done:e-2", f"{key_prefix}done:e-3"]

    async def scenario() -> tuple[int, int, int]:
        async with aioredis.Redis.from_url(redis_url) as aclient:
            acks = Acks(aclient, stream, "g")
            plain = await acks.ack(ids[:2])
            again = await acks.ack(ids[:2])  # no longer pending
            marked = await acks.ack_marking_done(ids[2:], keys, 60)
            return plain, again, marked

    assert asyncio.run(scenario()) == (2, 0, 2)
    assert client.xpending(stream, "g")["pending"] == 0
    assert [client.get(key) for key in keys] == [DONE.decode()] * 2
    assert all(0 < client.ttl(key) <= 60 for key in keys)


def test_dead_letter_moves_a_message_once(redis_url: str, key_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    stream = f"{key_prefix}orders"
    (msg_id,) = pending_for(client, stream, 1)
    delivery = Delivery(msg_id.decode(), flat_fields(client.xrange(stream)[0][1]), 3)

    async def scenario() -> list[bool]:
        async with aioredis.Redis.from_url(redis_url) as aclient:
            acks = Acks(aclient, stream, "g")
            return [await acks.dead_letter(delivery, "boom"), await acks.dead_letter(delivery, "boom")]

    assert asyncio.run(scenario()) == [True, False], "the second consumer to give up writes nothing"
    (entry,) = [f for _, f in client.xrange(f"{stream}:dlq")]
    assert entry[b"id"] == msg_id and entry[b"error"] == b"boom" and entry[b"attempts"] == b"3"
    assert entry[b"event_id"] == b"e-0"
    assert client.xpending(stream, "g")["pending"] == 0
