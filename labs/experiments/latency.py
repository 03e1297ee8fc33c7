"""XADD latency with and without trimming: client percentiles beside the server's own time.

The lab's bonus (and later the benchmark) asks what ``MAXLEN`` costs. A round trip on
loopback takes tens of microseconds while the trimming itself costs a few, so the client's
percentiles mostly measure the network stack and the client library. The server's
``usec_per_call`` from ``INFO commandstats`` (after ``CONFIG RESETSTAT``) shows the
command's own cost, so both are reported side by side.

A trap when porting the course's Go code: go-redis treats ``MaxLen: 0`` as "no limit",
but redis-py sends ``maxlen=0`` to the server, as ``MAXLEN ~ 0`` (``approximate=True`` is
its default). Approximate trimming removes whole radix-tree nodes and at most ``LIMIT``
entries per call (by default 100 x ``stream-node-max-entries``, 10,000), so each such XADD
cuts a long stream by about 10,000 entries until it is empty (25,000 -> 15,001 -> 5,002 -> 0,
:func:`maxlen_zero_lengths`); a raw ``MAXLEN 0`` (exact) empties it at once. "No limit" in
redis-py is ``maxlen=None`` (no ``MAXLEN`` argument at all), and :func:`xadd_latency`
refuses ``maxlen=0`` for that reason.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from labs.launcher.process import command

log = logging.getLogger(__name__)

FIELDS: dict[FieldT, EncodableT] = {"type": "order.paid", "order_id": "o-42", "amount": "1234.50"}
PREFILL_BATCH = 1000
WARMUP = 200


@dataclass(frozen=True)
class LatencyStats:
    """Client-side XADD percentiles in microseconds, and the server's mean time per call."""

    p50_us: float
    p99_us: float
    p999_us: float
    server_usec_per_call: float
    n: int


def case_label(maxlen: int | None, approximate: bool) -> str:
    """``no MAXLEN``, ``MAXLEN ~ 10000`` or ``MAXLEN = 10000``, as the command spells it."""
    if maxlen is None:
        return "no MAXLEN"
    return f"MAXLEN {'~' if approximate else '='} {maxlen}"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (``q`` in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(round(q * len(sorted_values) / 100, 9)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def server_usec_per_call(client: redis.Redis, command: str = "xadd") -> float:
    """``usec_per_call`` of ``command`` from ``INFO commandstats`` (0.0 when it was not called)."""
    stats: dict[str, Any] = client.info("commandstats")
    entry = stats.get(f"cmdstat_{command}", {})
    return float(entry.get("usec_per_call", 0.0)) if isinstance(entry, dict) else 0.0


def _prefill(client: redis.Redis, stream: str, entries: int) -> None:
    """Fill the stream up to the limit so that every measured XADD has something to trim."""
    left = entries
    while left > 0:
        pipe = client.pipeline(transaction=False)
        for _ in range(min(PREFILL_BATCH, left)):
            pipe.xadd(stream, FIELDS)
        pipe.execute()
        left -= PREFILL_BATCH


def xadd_latency(
    redis_url: str,
    *,
    stream: str,
    n: int,
    maxlen: int | None,
    approximate: bool,
    on_progress: Callable[[int], None] | None = None,
) -> LatencyStats:
    """Time ``n`` XADDs to ``stream`` (deleted before and after), one round trip each.

    With a ``maxlen`` the stream is first filled to the limit, then ``CONFIG RESETSTAT``
    clears the server's counters so that ``usec_per_call`` covers the measured calls only.
    Run it where nothing else sends XADD at the same time (``CONFIG RESETSTAT`` resets the
    server's statistics for everyone).
    """
    if maxlen == 0:
        raise ValueError(
            "maxlen=0 sends MAXLEN ~ 0, which trims the stream towards nothing (up to 10,000 entries "
            "per XADD); pass None for no limit"
        )
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    samples_ns: list[int] = []
    with contextlib.closing(redis.Redis.from_url(redis_url)) as client:
        client.delete(stream)
        try:
            _prefill(client, stream, maxlen if maxlen is not None else WARMUP)
            client.config_resetstat()
            for i in range(n):
                started = time.perf_counter_ns()
                client.xadd(stream, FIELDS, maxlen=maxlen, approximate=approximate)
                samples_ns.append(time.perf_counter_ns() - started)
                if on_progress is not None and (i + 1) % 1000 == 0:
                    on_progress(i + 1)
            server_us = server_usec_per_call(client)
        finally:
            client.delete(stream)
    ordered = sorted(ns / 1000 for ns in samples_ns)
    stats = LatencyStats(
        p50_us=percentile(ordered, 50),
        p99_us=percentile(ordered, 99),
        p999_us=percentile(ordered, 99.9),
        server_usec_per_call=server_us,
        n=n,
    )
    log.info("XADD %s: %s", case_label(maxlen, approximate), stats)
    return stats


def maxlen_zero_lengths(client: redis.Redis, stream: str, *, entries: int, calls: int, raw: bool) -> list[int]:
    """Fill ``stream`` (deleted first) with ``entries`` entries, then XADD with a zero limit ``calls`` times.

    Returns ``XLEN`` after the fill and after each call. ``raw=False`` is redis-py's
    ``xadd(..., maxlen=0)``, that is ``XADD ... MAXLEN ~ 0``: whole nodes only, at most
    10,000 entries (``LIMIT``'s default) per call. ``raw=True`` sends ``XADD ... MAXLEN 0``
    (exact, no limit on the work) through ``execute_command``. The stream is deleted afterwards.
    """
    client.delete(stream)
    try:
        _prefill(client, stream, entries)
        lengths = [int(client.xlen(stream))]
        for _ in range(calls):
            if raw:
                command(client, "XADD", stream, "MAXLEN", "0", "*", "i", "x")
            else:
                client.xadd(stream, {"i": "x"}, maxlen=0)  # reads as "no limit" to a Go programmer
            lengths.append(int(client.xlen(stream)))
        return lengths
    finally:
        client.delete(stream)


LAB_CASES: tuple[tuple[int | None, bool], ...] = ((None, False), (10_000, True), (10_000, False))
"""The bonus's three cases: no limit, ``MAXLEN ~ 10000`` and ``MAXLEN = 10000``."""
