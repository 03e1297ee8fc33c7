"""What the lab reads from Redis itself, through Sentinel: group state, stream contents, the DLQ.

Every call goes to whatever master a quorum of sentinels names at that moment; during a
failover a call may fail, and the callers record a gap rather than a guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from labs.lab3.deliveries import PelEntry
from labs.launcher import sentinel
from labs.launcher.sentinel import Timeouts

SOCKET_TIMEOUT_S = 1.0
PAGE = 1000
PEL_SAMPLE = 2000  # entries per XPENDING sample: far more than a cell ever holds in hand


@dataclass(frozen=True)
class GroupState:
    """``XINFO GROUPS`` / ``XINFO STREAM`` of one group: pending, lag, last delivered id."""

    pending: int
    lag: int | None
    last_delivered_id: str
    length: int


def master_client(sentinels: Sequence[tuple[str, int]], master_name: str) -> redis.Redis:
    """A client of the current master (asked of the sentinels on every new connection)."""
    timeouts = Timeouts(socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S)
    return sentinel.master_client(sentinels, master_name, sentinel_kwargs=timeouts, decode_responses=True, **timeouts)


def group_state(client: redis.Redis, stream: str, group: str) -> GroupState | None:
    """``XINFO GROUPS`` and ``XINFO STREAM`` in one pipeline; None when the group does not exist yet.

    The lag is Redis's own when it knows it, else 0 when the last delivered id is the
    stream's last generated id, else None (unknown: Redis 7.0 cannot tell after some failovers).
    """
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.xinfo_groups(stream)
            pipe.xinfo_stream(stream)
            groups, info = pipe.execute()
    except redis.ResponseError:
        return None
    for g in groups:
        if g.get("name") == group:
            last = str(g.get("last-delivered-id") or "0-0")
            lag = g.get("lag")
            if lag is None and last == str(info.get("last-generated-id")):
                lag = 0
            known = None if lag is None else int(lag)
            return GroupState(int(g.get("pending") or 0), known, last, int(info.get("length") or 0))
    return None


def entries(client: redis.Redis, stream: str, end: str = "+") -> Iterator[tuple[str, dict[str, str]]]:
    """``XRANGE stream - end`` page by page: every entry with its fields."""
    start = "-"
    while True:
        page: list[Any] = client.xrange(stream, min=start, max=end, count=PAGE) or []
        yield from ((str(i), dict(f)) for i, f in page)
        if len(page) < PAGE:
            return
        start = "(" + str(page[-1][0])


def pending_ids(client: redis.Redis, stream: str, group: str) -> list[str]:
    """``XPENDING stream group - + N``: the ids nobody has acked yet."""
    try:
        rows = client.xpending_range(stream, group, "-", "+", 1_000_000)
    except redis.ResponseError:
        return []
    return [str(r["message_id"]) for r in rows]


def pel(client: redis.Redis, stream: str, group: str, consumer: str | None = None,
        count: int = PEL_SAMPLE) -> tuple[PelEntry, ...]:
    """``XPENDING stream group - + count [consumer]``: id, holder, idle ms and delivery count of each entry."""
    try:
        rows = client.xpending_range(stream, group, "-", "+", count, consumername=consumer)
    except redis.ResponseError:  # NOGROUP: the group does not exist (yet)
        return ()
    return tuple(PelEntry(str(r["message_id"]), str(r["consumer"]), int(r["time_since_delivered"]),
                          int(r["times_delivered"])) for r in rows)


def pending_by_consumer(client: redis.Redis, stream: str, group: str) -> dict[str, int]:
    """The ``XPENDING stream group`` summary per consumer."""
    with contextlib.suppress(redis.ResponseError):
        summary: dict[str, Any] = client.xpending(stream, group)
        return {str(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
    return {}
