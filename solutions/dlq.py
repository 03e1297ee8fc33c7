"""Dead letters: ``<stream>:dlq`` gets the original fields plus ``id``, ``error`` and ``attempts``.

This module says what a dead letter looks like; :meth:`solutions.acks.Acks.dead_letter`
moves a message there (the XACK of the original and the XADD, atomically, exactly once).
"""

from __future__ import annotations

from solutions.messages import Delivery, field_map


def dlq_stream(stream: str) -> str:
    """Where the dead letters of ``stream`` go."""
    return f"{stream}:dlq"


def dead_letter_fields(delivery: Delivery, error: str) -> list[bytes]:
    """The DLQ entry as a flat field list: the original fields, then ``id``, ``error``, ``attempts``."""
    extra = {
        b"id": delivery.msg_id.encode(),
        b"error": error.encode(),
        b"attempts": str(delivery.deliveries).encode(),
    }
    flat: list[bytes] = []
    for name, value in field_map(delivery.fields or []).items():
        if name not in extra:
            flat += [name, value]
    for name, value in extra.items():
        flat += [name, value]
    return flat
