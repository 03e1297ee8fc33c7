"""Dead letters: ``<stream>:dlq`` gets the original fields plus ``id``, ``error`` and ``attempts``.

The XACK of the original and the XADD to the DLQ happen in one atomic step, a Lua script
(atomic like ``MULTI``/``EXEC``, and replicated as one unit). It adds the dead letter only
if the XACK found the message pending, so two consumers that give up on the same message
(one of them after a reclaim) cannot both write it: each message lands in the DLQ once.
"""

from __future__ import annotations

import logging

from solutions.connection import Client
from solutions.messages import Delivery

log = logging.getLogger(__name__)

DEAD_LETTER_LUA = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then
    redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
end
return acked
"""


def dead_letter_fields(delivery: Delivery, error: str) -> list[bytes]:
    """The DLQ entry as a flat field list: the original fields, then ``id``, ``error``, ``attempts``."""
    extra = {
        b"id": delivery.msg_id.encode(),
        b"error": error.encode(),
        b"attempts": str(delivery.deliveries).encode(),
    }
    flat: list[bytes] = []
    for name, value in (delivery.fields or {}).items():
        if name not in extra:
            flat += [name, value]
    for name, value in extra.items():
        flat += [name, value]
    return flat


class DeadLetters:
    """Moves a message to ``<stream>:dlq`` and acks it, atomically, exactly once."""

    def __init__(self, client: Client, stream: str, group: str) -> None:
        self.client = client
        self.stream = stream
        self.group = group
        self.dlq_stream = f"{stream}:dlq"
        self._script = client.register_script(DEAD_LETTER_LUA)

    async def send(self, delivery: Delivery, error: str) -> bool:
        """XACK the original and, if it was still pending, XADD it to the DLQ (one script, ``EVALSHA``).

        Returns False when the message was no longer pending (someone else finished it).
        """
        args: list[bytes | str] = [self.group, delivery.msg_id, *dead_letter_fields(delivery, error)]
        acked = await self._script(keys=[self.stream, self.dlq_stream], args=args)
        if int(acked) == 1:
            log.warning("dead-lettered %s after %s deliveries: %s", delivery.msg_id, delivery.deliveries, error)
            return True
        log.info("%s was no longer pending; not dead-lettered again", delivery.msg_id)
        return False
