"""Moving a message to the DLQ: why the reference worker uses a Lua script and not ``MULTI``.

The move is two writes: ``XACK`` the original and ``XADD`` its dead letter to ``<stream>:dlq``.
Both must happen together (atomically, replicated as one unit), and the dead letter must be
added only if the ``XACK`` really removed the message from the PEL: if another consumer
has meanwhile finished it (its redelivery was handled and acked) or dead-lettered it, a
second dead letter is a false alarm about work that was done.

``MULTI ... EXEC`` gives the first property and cannot give the second: the commands are
queued and run as a block, their replies come back only with ``EXEC``, so nothing inside the
transaction can depend on what ``XACK`` returned. A script can
(:data:`solutions.acks.DEAD_LETTER_LUA`: ``XADD`` only ``if acked == 1``).
:func:`late_dead_letter` runs both against a message that another consumer has already acked.
Tests in ``tests/test_dlq_move.py``.
"""

from __future__ import annotations

import redis
from redis.typing import EncodableT, FieldT

from solutions.acks import DEAD_LETTER_LUA

GROUP = "billing"
FIELDS: dict[str, str] = {"type": "order.paid", "order_id": "o-1", "amount": "10.00", "event_id": "evt-1"}


def late_dead_letter(client: redis.Redis, stream: str, *, how: str) -> tuple[int, int]:
    """A worker dead-letters a message that another consumer already acked: (its XACK reply, DLQ length).

    ``how`` is ``"multi"`` (``MULTI; XACK; XADD; EXEC``) or ``"script"`` (the worker's
    ``DEAD_LETTER_LUA``). Both streams are deleted afterwards.
    """
    dlq = f"{stream}:dlq"
    client.delete(stream, dlq)
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        fields: dict[FieldT, EncodableT] = {key: value for key, value in FIELDS.items()}  # XADD's field types
        msg_id = str(client.xadd(stream, fields))
        client.xreadgroup(GROUP, "billing-1", {stream: ">"}, count=1)  # billing-1 fails it, again and again ...
        client.xclaim(stream, GROUP, "billing-2", 0, [msg_id])  # ... the rescuer gives it to billing-2,
        client.xack(stream, GROUP, msg_id)  # which handles it and acks: done
        dead_letter = [*FIELDS.items(), ("id", msg_id), ("error", "simulated failure"), ("attempts", "5")]
        if how == "multi":
            acked = _multi(client, stream, dlq, msg_id, dead_letter)
        elif how == "script":
            script = client.register_script(DEAD_LETTER_LUA)
            acked = int(script(keys=[stream, dlq], args=[GROUP, msg_id, *(x for pair in dead_letter for x in pair)]))
        else:
            raise ValueError(f"how must be 'multi' or 'script', got {how!r}")
        return acked, int(client.xlen(dlq))
    finally:
        client.delete(stream, dlq)


def _multi(client: redis.Redis, stream: str, dlq: str, msg_id: str, dead_letter: list[tuple[str, str]]) -> int:
    """``MULTI; XACK stream group id; XADD dlq * ...; EXEC``: both run, whatever XACK returns."""
    with client.pipeline(transaction=True) as pipe:
        pipe.xack(stream, GROUP, msg_id)
        pipe.xadd(dlq, dict(dead_letter))
        acked, _dead_letter_id = pipe.execute()
    return int(acked)
