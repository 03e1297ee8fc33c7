"""Stream entry IDs: ``<milliseconds>-<sequence>``, the time Redis (or the producer) gave the entry."""

from __future__ import annotations


def id_ms(stream_id: str | bytes) -> int:
    """The milliseconds part of a stream ID (``"1718000000123-4"`` -> ``1718000000123``)."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)
    return int(text.split("-", 1)[0])
