"""The queue competes with the cache: a stream under ``maxmemory`` and an eviction policy.

Redis evicts whole keys. A stream is one key, and its consumer groups, their consumers and
their PELs live inside it, so when an eviction policy picks the stream, all of that goes at
once. Nothing tells the producer or the consumers: the next ``XREADGROUP`` answers
``NOGROUP``, and the producer's next ``XADD`` quietly creates a new, empty stream with no
group at all.

:func:`run_eviction` shows it on a throwaway ``redis-server`` (a free port, a temporary
directory, no persistence) with ``maxmemory`` a little above the empty server's footprint:

- ``allkeys-lru``: a stream with a group and a PEL is left untouched for a second (the LRU
  clock ticks once a second), then cache keys are written until the stream is gone;
- ``noeviction``: the same cache writes end in an ``OOM`` error, and so does the producer's
  ``XADD``; the stream, its group and its PEL stay as they were;
- ``volatile-lru`` with a TTL on every cache key: only keys with a TTL are candidates, so the
  stream (no TTL) survives while the cache keys make room for each other.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from labs.launcher import binaries, ports
from labs.launcher.process import RedisProcess
from labs.polling import poll_value

log = logging.getLogger(__name__)

HEADROOM_BYTES = 1024 * 1024  # maxmemory = the empty server's used_memory + this
VALUE_BYTES = 1024
BATCH = 50
MAX_CACHE_KEYS = 5_000  # about 2.5 times what fits: far more than LRU needs to reach the stream
LRU_TICK_S = 1.0  # Redis keeps a key's access time in a clock with a 1 s resolution
PRODUCER_WRITES = 200
GROUP = "billing"
CONSUMER = "billing-1"


@dataclass(frozen=True)
class EvictionResult:
    """What filling the cache did to a stream with a consumer group and a PEL."""

    policy: str
    maxmemory_bytes: int
    pending_before: int  # the PEL of the group before the cache was filled
    cache_keys_written: int  # SETs that succeeded
    evicted_keys: int  # INFO stats evicted_keys
    cache_error: str  # the error that stopped the cache writes ('' when none)
    stream_exists: bool  # EXISTS on the stream after the fill
    pending_after: int | None  # XPENDING after the fill (None when it failed)
    consumer_error: str  # the reply to the consumer's XREADGROUP ('' when it worked)
    producer_accepted: int  # the producer's XADDs that the full server still took
    producer_error: str  # the error that stopped the producer ('' when all its XADDs worked)
    groups_after_xadd: int  # groups on the stream after the producer's XADD


@contextlib.contextmanager
def throwaway_redis(home: Path, *, policy: str, headroom_bytes: int = HEADROOM_BYTES) -> Iterator[RedisProcess]:
    """A ``redis-server`` on a free port under ``home`` with ``maxmemory`` and ``policy``; killed on exit."""
    port = ports.free_port()
    proc = RedisProcess(f"eviction-{port}", port, home, binaries.require("redis-server"))
    home.mkdir(parents=True, exist_ok=True)
    proc.conf.write_text(
        f'port {port}\nbind 127.0.0.1\ndir "{proc.data_dir}"\nsave ""\nappendonly no\n'
        f"maxmemory-policy {policy}\n"
    )
    proc.start("a free port")
    try:
        with contextlib.closing(proc.client()) as client:
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", used + headroom_bytes)
        yield proc
    finally:
        proc.kill(signal.SIGKILL)


def prepare_queue(client: redis.Redis, stream: str, *, entries: int = 20, taken: int = 5) -> int:
    """A stream with group ``billing`` whose consumer took ``taken`` entries and acked none; the PEL size."""
    client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    for i in range(entries):
        client.xadd(stream, {"order_id": f"o-{i}", "amount": "10.00"})
    client.xreadgroup(GROUP, CONSUMER, {stream: ">"}, count=taken)
    return int(client.xpending(stream, GROUP)["pending"])


def wait_idle(client: redis.Redis, key: str, min_idle_s: int = 1, timeout_s: float = 5.0) -> int:
    """Poll ``OBJECT IDLETIME key`` (it does not touch the key) until it reaches ``min_idle_s``."""
    idle = poll_value(lambda: int(client.object("idletime", key) or 0), lambda s: s >= min_idle_s, timeout_s)
    if idle < min_idle_s:
        raise TimeoutError(f"{key} stayed idle {idle} s < {min_idle_s} s for {timeout_s} s")
    return idle


def fill_cache(
    client: redis.Redis, prefix: str, stream: str, *, ttl_s: int | None = None, max_keys: int = MAX_CACHE_KEYS
) -> tuple[int, str]:
    """``SET`` cache keys until the stream is gone, a write fails, or ``max_keys``; (written, error).

    The stream is checked with ``EXISTS`` between batches (``EXISTS`` does not touch its LRU clock).
    """
    value = "x" * VALUE_BYTES
    written = 0
    while written < max_keys:
        pipe = client.pipeline(transaction=False)
        for i in range(written, written + BATCH):
            pipe.set(f"{prefix}{i}", value, ex=ttl_s)
        replies = pipe.execute(raise_on_error=False)
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        written += len(replies) - len(errors)
        if errors:
            return _top_up(client, prefix, written, value, ttl_s)
        if not client.exists(stream):
            return written, ""
    return written, ""


def _top_up(client: redis.Redis, prefix: str, written: int, value: str, ttl_s: int | None) -> tuple[int, str]:
    """After a failed batch, single ``SET``s until one fails: no big pipeline buffer is left to free.

    A batch's query buffer counts in ``used_memory`` while it is parsed; once it is freed the
    server can dip back under ``maxmemory``, and the next write would pass.
    """
    for i in range(written, written + BATCH * 4):
        try:
            client.set(f"{prefix}{i}", value, ex=ttl_s)
        except redis.ResponseError as exc:
            return i, error_text(exc)
    return written + BATCH * 4, ""


def error_text(exc: BaseException) -> str:
    """``OutOfMemoryError: command not allowed ...``: redis-py strips the ``OOM`` prefix into the class."""
    return f"{type(exc).__name__}: {exc}"


def reply_error(call: Callable[[], object]) -> str:
    """Run ``call``; the Redis error it raised as :func:`error_text`, '' when it worked."""
    try:
        call()
    except redis.ResponseError as exc:
        return error_text(exc)
    return ""


def produce_until_error(client: redis.Redis, stream: str, max_writes: int = PRODUCER_WRITES) -> tuple[int, str]:
    """The producer keeps calling ``XADD``: (accepted, the error that stopped it or '').

    Right at ``maxmemory`` a small write can slip in (the rejected cache write's buffer was just
    freed), but under ``noeviction`` every accepted ``XADD`` adds memory, so a few later one fails.
    """
    for i in range(max_writes):
        try:
            client.xadd(stream, {"type": "order.paid", "order_id": f"o-after-{i}", "amount": "10.00"})
        except redis.ResponseError as exc:
            return i, error_text(exc)
    return max_writes, ""


def run_eviction(
    home: Path, policy: str, *, ttl_s: int | None = None, max_keys: int = MAX_CACHE_KEYS
) -> EvictionResult:
    """Fill the cache beside a stream with a PEL under ``policy``; see what the queue's clients get."""
    stream = "orders"
    with throwaway_redis(home, policy=policy) as proc, contextlib.closing(proc.client(5.0)) as client:
        maxmemory = int(str(client.config_get("maxmemory")["maxmemory"]))
        pending_before = prepare_queue(client, stream)
        if "lfu" not in policy:  # under an LFU policy Redis keeps no idle time (OBJECT IDLETIME is an error)
            wait_idle(client, stream, int(LRU_TICK_S))
        written, cache_error = fill_cache(client, "cache:", stream, ttl_s=ttl_s, max_keys=max_keys)
        exists = bool(client.exists(stream))
        producer_accepted, producer_error = produce_until_error(client, stream)
        pending_after: int | None
        try:
            pending_after = int(client.xpending(stream, GROUP)["pending"])
        except redis.ResponseError:
            pending_after = None
        consumer_error = reply_error(lambda: client.xreadgroup(GROUP, CONSUMER, {stream: ">"}, count=1))
        groups = len(client.xinfo_groups(stream)) if client.exists(stream) else 0
        result = EvictionResult(
            policy=policy,
            maxmemory_bytes=maxmemory,
            pending_before=pending_before,
            cache_keys_written=written,
            evicted_keys=int(client.info("stats")["evicted_keys"]),
            cache_error=cache_error,
            stream_exists=exists,
            pending_after=pending_after,
            consumer_error=consumer_error,
            producer_accepted=producer_accepted,
            producer_error=producer_error,
            groups_after_xadd=groups,
        )
    log.info("eviction under %s: %s", policy, result)
    return result
