"""Every XACK the worker sends, in one place: plain, with ``done`` markers, and into the DLQ.

- :meth:`Acks.ack`: ``XACK stream group id ...`` for a committed run, for duplicates and for
  entries deleted from the stream while pending.
- :meth:`Acks.ack_marking_done`: ``SET key done EX ttl`` for each event and the XACK, in one
  script (atomic like ``MULTI``): the second phase of ``redis-2phase``.
- :meth:`Acks.give_back`: not an XACK; ``XCLAIM ... RETRYCOUNT`` undoes a delivery that Redis
  itself (out of memory, no connection) or the business store (down) made fail, so it does
  not count as an attempt.
- :meth:`Acks.dead_letter`: the XACK of the original and the XADD of its dead letter, in one
  script (atomic, and replicated as one unit). It adds the dead letter only if the XACK found
  the message pending, so two consumers that give up on the same message (one of them after
  a reclaim) cannot both write it: each message lands in the DLQ once.

Nothing else in the worker acknowledges a message; the pipeline decides *when*, this module
says *how*. Batching across runs is the pipeline's (see :mod:`solutions.batching`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.typing import StreamIdT

from solutions.connection import Client, Direct
from solutions.dlq import dead_letter_fields, dlq_stream
from solutions.messages import Delivery

log = logging.getLogger(__name__)

DONE = b"done"

# XACK first: over ``maxmemory`` Redis refuses a script's first write if it is a ``denyoom``
# command (SET, XADD) but, to keep the script atomic, lets it finish once it has written.
# XACK is not ``denyoom``, so the markers and the ack land together under OOM too; with SET
# first the whole call was refused, the charged message stayed pending, its lease expired and
# the redelivery charged it again (tests/test_worker_oom.py).
DONE_AND_ACK_LUA = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4))
for i = 2, #KEYS do
    redis.call('SET', KEYS[i], ARGV[3], 'EX', ARGV[2])
end
return acked
"""
DEAD_LETTER_LUA = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then
    redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
end
return acked
"""


class Acks:
    """The acknowledgements of one consumer group on one stream."""

    def __init__(self, client: Client, stream: str, group: str) -> None:
        self.client = client
        self.stream = stream
        self.group = group
        self.dlq_stream = dlq_stream(stream)
        self._direct = Direct(client)  # the hot XACK: a connection of its own
        self._done_script = client.register_script(DONE_AND_ACK_LUA)
        self._dead_letter_script = client.register_script(DEAD_LETTER_LUA)

    async def ack(self, ids: Sequence[str]) -> int:
        """``XACK stream group id ...``; returns how many were still pending."""
        if not ids:
            return 0
        return int(await self._direct.call(b"XACK", self.stream, self.group, *ids))

    async def ack_marking_done(self, ids: Sequence[str], keys: Sequence[str], ttl_s: int) -> int:
        """``SET key done EX ttl`` for every key and ``XACK`` every id, atomically (one ``EVALSHA``)."""
        if not ids:
            return 0
        args: list[bytes | str | int] = [self.group, ttl_s, DONE, *ids]
        return int(await self._done_script(keys=[self.stream, *keys], args=args))

    async def give_back(self, deliveries: Sequence[Delivery], consumer: str) -> None:
        """``XCLAIM stream group consumer 0 id ... RETRYCOUNT n JUSTID``: set the delivery count of
        our pending messages back by one (an attempt that Redis or the store, not the message,
        made fail does not use up the retry budget); one call per count. Not ``denyoom``: works
        under OOM."""
        by_count: dict[int, list[str]] = {}
        for delivery in deliveries:
            by_count.setdefault(max(delivery.deliveries - 1, 0), []).append(delivery.msg_id)
        for count, ids in by_count.items():
            message_ids: list[StreamIdT] = [*ids]
            await self.client.xclaim(self.stream, self.group, consumer, 0, message_ids, retrycount=count, justid=True)

    async def dead_letter(self, delivery: Delivery, error: str) -> bool:
        """XACK the original and, if it was still pending, XADD it to ``<stream>:dlq`` (one ``EVALSHA``).

        Returns False when the message was no longer pending (someone else finished it).
        """
        args: list[bytes | str] = [self.group, delivery.msg_id, *dead_letter_fields(delivery, error)]
        acked = await self._dead_letter_script(keys=[self.stream, self.dlq_stream], args=args)
        if int(acked) == 1:
            log.warning("dead-lettered %s after %s deliveries: %s", delivery.msg_id, delivery.deliveries, error)
            return True
        log.info("%s was no longer pending; not dead-lettered again", delivery.msg_id)
        return False
