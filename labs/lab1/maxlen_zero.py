"""``maxlen=0`` in redis-py, measured for lab 1's report (the course's Go code reads 0 as "no limit").

In go-redis ``MaxLen: 0`` means no limit. redis-py's ``xadd(stream, fields, maxlen=0)`` sends
``MAXLEN ~ 0`` (``approximate=True`` is its default): Redis then trims whole radix-tree
nodes, and an approximate trim removes at most 100 x ``stream-node-max-entries`` (10,000 by
default) entries per call, so a stream of 25,000 entries keeps 15,001, then 5,002. An exact
``MAXLEN 0`` (``approximate=False``, or a raw ``XADD ... MAXLEN 0`` through
``execute_command``) empties it at once. "No limit" in redis-py is ``maxlen=None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

ENTRIES = 25_000
BATCH = 1000


@dataclass(frozen=True)
class MaxlenZero:
    """XLEN of a filled stream after each ``xadd(..., maxlen=0)`` and after one exact ``MAXLEN 0``."""

    filled: int
    approximate: tuple[int, ...]
    exact: int


def measure(client: redis.Redis, stream: str, entries: int = ENTRIES, calls: int = 2) -> MaxlenZero:
    """Fill ``stream`` with ``entries``, then ``calls`` times ``xadd(maxlen=0)``, then one exact; delete it."""
    client.delete(stream)
    try:
        for start in range(0, entries, BATCH):
            with client.pipeline(transaction=False) as pipe:
                for n in range(start, min(entries, start + BATCH)):
                    pipe.xadd(stream, {"n": n})
                pipe.execute()
        filled = int(client.xlen(stream))
        lengths = []
        for _ in range(calls):
            client.xadd(stream, {"n": "trim"}, maxlen=0)  # redis-py: MAXLEN ~ 0
            lengths.append(int(client.xlen(stream)))
        client.xadd(stream, {"n": "trim"}, maxlen=0, approximate=False)  # MAXLEN 0
        return MaxlenZero(filled, tuple(lengths), int(client.xlen(stream)))
    finally:
        client.delete(stream)


def note(m: MaxlenZero) -> str:
    """The report's note, with the measured lengths."""
    steps = " -> ".join(f"{n:,}" for n in (m.filled, *m.approximate))
    return (
        "The course's Go code says MaxLen = 0 means no limit: true for go-redis. redis-py's "
        "xadd(..., maxlen=0) sends MAXLEN ~ 0 (approximate is its default), and an approximate trim removes "
        f"whole nodes, at most 10,000 entries per call: measured here, {steps} entries after one call each. "
        f"An exact MAXLEN 0 (xadd(..., maxlen=0, approximate=False), or a raw XADD ... MAXLEN 0 through "
        f"execute_command) left {m.exact}. 'No limit' in redis-py is maxlen=None: no MAXLEN argument at all."
    )
