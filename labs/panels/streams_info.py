"""One bounded snapshot of a stream and one of its consumer groups, for panels and reports.

A snapshot costs one round trip: a pipeline of XLEN, XRANGE ``- + COUNT 1`` (the oldest
entry), XINFO GROUPS, the summary form of XPENDING and TIME. Every part is bounded: the
summary form of XPENDING never walks the PEL entry by entry, XRANGE reads one entry, and
the per-consumer counts are capped at ``max_consumers`` (the busiest ones are kept).

A stream or group that does not exist yet is not an error: it reads as empty, so a panel
can be started before the producer and the group are. :func:`snapshot_client` is the client a
live panel takes its snapshots with: short timeouts and no retries, so that a dead server costs
a panel one short wait, not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from solutions.stream_ids import id_ms

MAX_CONSUMERS = 16


@dataclass(frozen=True)
class StreamStats:
    """What a stream and its group look like at one moment (server time)."""

    server_ms: int
    length: int
    pending_total: int
    pending_by_consumer: dict[str, int] = field(default_factory=dict)
    lag: int | None = None
    stream_age_ms: int | None = None
    group_exists: bool = False
    oldest_pending_age_ms: int | None = None


class GroupInfo(TypedDict, total=False):
    """The fields read of one row of ``XINFO GROUPS`` (redis-py's dict; names are bytes without decoding)."""

    name: str | bytes
    lag: int | None


class PendingConsumer(TypedDict):
    """One consumer of the summary form of ``XPENDING``."""

    name: str | bytes
    pending: int


class PendingSummary(TypedDict):
    """The summary form of ``XPENDING`` as redis-py parses it."""

    pending: int
    min: str | bytes | None
    max: str | bytes | None
    consumers: list[PendingConsumer]


def snapshot_client(redis_url: str, *, timeout_s: float, client_name: str) -> redis.Redis:
    """A client for a monitor thread: decoded replies, ``timeout_s`` to connect and to read, no retries."""
    return redis.Redis.from_url(
        redis_url,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        client_name=client_name,
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_missing(reply: object) -> bool:
    """True for the errors that mean "no such stream or group yet"."""
    if not isinstance(reply, redis.ResponseError):
        return False
    message = str(reply).lower()
    return "no such key" in message or "nogroup" in message


def _raise_unexpected(replies: list[object]) -> None:
    for reply in replies:
        if isinstance(reply, Exception) and not _is_missing(reply):
            raise reply


def _group_info(groups_reply: list[GroupInfo] | Exception, group: str) -> GroupInfo | None:
    if isinstance(groups_reply, Exception):
        return None
    for info in groups_reply:
        if _text(info.get("name", "")) == group:
            return info
    return None


def _oldest_pending_id(summary: PendingSummary | Exception) -> str | None:
    if isinstance(summary, Exception) or not summary or not summary.get("pending"):
        return None
    oldest = summary.get("min")
    return _text(oldest) if oldest else None


def _pending_by_consumer(summary: PendingSummary | Exception, max_consumers: int) -> tuple[int, dict[str, int]]:
    if isinstance(summary, Exception) or not summary:
        return 0, {}
    counts = {_text(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
    busiest = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:max_consumers]
    return int(summary.get("pending") or 0), dict(sorted(busiest))


def read_stream_stats(
    client: redis.Redis,
    stream: str,
    group: str,
    *,
    max_consumers: int = MAX_CONSUMERS,
) -> StreamStats:
    """One snapshot: XLEN, XRANGE (one entry), XINFO GROUPS, XPENDING (summary) and TIME.

    ``stream_age_ms`` is the server's time minus the timestamp of the oldest entry still
    in the stream: how much history the stream keeps (None when it is empty).
    ``oldest_pending_age_ms`` is the same for the oldest entry in the group's PEL (the
    summary's smallest ID): how long the oldest unacknowledged work has waited since it was
    added (None when the PEL is empty). ``lag`` is
    what XINFO GROUPS reports (entries not yet delivered to the group; None when Redis
    cannot tell, e.g. after XDEL in the undelivered range, or when the group is missing).
    """
    pipe = client.pipeline(transaction=False)
    pipe.xlen(stream)
    pipe.xrange(stream, "-", "+", count=1)
    pipe.xinfo_groups(stream)
    pipe.xpending(stream, group)
    pipe.time()
    length, oldest, groups, summary, now = pipe.execute(raise_on_error=False)
    _raise_unexpected([length, oldest, groups, summary, now])
    server_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    info = _group_info(groups, group)
    pending_total, by_consumer = _pending_by_consumer(summary, max_consumers)
    lag = info.get("lag") if info else None
    oldest_pending = _oldest_pending_id(summary)
    return StreamStats(
        server_ms=server_ms,
        length=int(length),
        pending_total=pending_total,
        pending_by_consumer=by_consumer,
        lag=int(lag) if lag is not None else None,
        stream_age_ms=max(0, server_ms - id_ms(oldest[0][0])) if oldest else None,
        group_exists=info is not None,
        oldest_pending_age_ms=max(0, server_ms - id_ms(oldest_pending)) if oldest_pending else None,
    )
