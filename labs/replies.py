"""The one shape redis-py's stream replies have for the course's clients, as a type.

redis-py 8 annotates what XREAD, XREADGROUP and XCLAIM return as a union of every shape any
protocol or option can give. Every client of the course speaks RESP2 with ``decode_responses=True``,
so a read is ``[[stream, [(id, fields), ...]], ...]`` and a claim ``[(id, fields), ...]``; the
helpers below say so in one place for the code that takes such a reply apart. At run time they
return the reply as it came: the ``isinstance`` check only rules out a RESP3 map, which no client
of the course receives.
"""

from __future__ import annotations

from typing import cast

Entry = tuple[str, dict[str, str]]  # (message id, fields)
StreamRead = list[tuple[str, list[Entry]]]  # [(stream, entries), ...]


def read(reply: object) -> StreamRead:
    """An ``XREAD`` / ``XREADGROUP`` reply: ``[]`` when nothing came, else a ``(stream, entries)`` per stream."""
    if not isinstance(reply, list):
        raise TypeError(f"a RESP2 stream read is a list, not {type(reply).__name__}")
    return cast(StreamRead, reply)


def claimed(reply: object) -> list[Entry]:
    """An ``XCLAIM`` reply (without ``JUSTID``): the claimed entries."""
    if not isinstance(reply, list):
        raise TypeError(f"an XCLAIM reply is a list, not {type(reply).__name__}")
    return cast(list[Entry], reply)
