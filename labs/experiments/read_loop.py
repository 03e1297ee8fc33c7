"""The read loop's traps (course module 3, section 3.1), each as a small measured run.

- :func:`empty_block_read`: ``XREADGROUP ... BLOCK`` with nothing to read returns an empty
  reply after the block time: that is not an error.
- :func:`block_past_socket_timeout`: a client whose ``socket_timeout`` is shorter than
  ``BLOCK`` gets a ``TimeoutError`` from a perfectly healthy idle read.
- :func:`stalled_read_delay_ms`: handling inside the loop stalls reading: a message that
  arrives while the loop handles waits for the handling to end.
- :func:`work_held_at_crash`: ``COUNT`` is a batch size. A loop that reads the next batch
  before the last is done (handing work to threads with no bound) piles up a PEL far past
  ``COUNT``; a loop that finishes each batch holds at most ``COUNT`` when it dies.

The consumer-name trap is in :mod:`labs.experiments.consumer_names`. Tests in
``tests/test_read_loop.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labs.polling import poll as poll

GROUP = "billing"


def entry_ids(reply: Any) -> list[str]:
    """The message ids of an ``XREADGROUP`` reply for one stream (RESP2 list shape); [] when empty."""
    return [msg_id for _stream, entries in (reply or []) for msg_id, _fields in entries]


def fresh_group(client: redis.Redis, stream: str, entries: int = 0) -> list[str]:
    """Delete ``stream``, create it with the group (``MKSTREAM``) and add ``entries`` entries."""
    client.delete(stream)
    client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    return [str(client.xadd(stream, {"order_id": f"o-{i}", "n": str(i)})) for i in range(entries)]


def empty_block_read(client: redis.Redis, stream: str, block_ms: int) -> tuple[Any, float]:
    """``XREADGROUP ... BLOCK block_ms`` on an empty group: (the reply, seconds it took)."""
    started = time.monotonic()
    reply = client.xreadgroup(GROUP, "reader", {stream: ">"}, count=16, block=block_ms)
    return reply, time.monotonic() - started


def block_past_socket_timeout(redis_url: str, stream: str, *, socket_timeout_s: float, block_ms: int) -> str:
    """An idle ``XREADGROUP BLOCK`` on a client with ``socket_timeout_s``: the exception's name, or "ok".

    Retries are off, so the first timeout is what the caller sees. The client comes from
    ``from_url``, whose connections retry nothing by default (redis-py 8.1: the pool's connections
    get ``Retry(NoBackoff(), 0)``, and notebook 05 asserts it); ``retry=`` says so explicitly. A
    ``Redis(host=...)`` client is another matter: its default ``Retry`` (10 retries, jittered
    exponential backoff from 10 ms up to 1 s, ``TimeoutError`` among the retried errors) would
    send the same blocking read up to 10 more times, each waiting out the socket timeout again,
    before raising the same error.
    """
    client = redis.Redis.from_url(
        redis_url, decode_responses=True, socket_timeout=socket_timeout_s, retry=Retry(NoBackoff(), 0)
    )
    try:
        client.xreadgroup(GROUP, "reader", {stream: ">"}, count=16, block=block_ms)
        return "ok"
    except redis.RedisError as exc:
        return type(exc).__name__
    finally:
        client.close()


def stalled_read_delay_ms(redis_url: str, stream: str, *, work_ms: int, inline: bool) -> float:
    """How long a message added during a handling waits before the loop reads it.

    The loop reads the first message and handles it for ``work_ms``: in the loop itself
    (``inline``) or in a thread while the loop goes back to ``XREADGROUP``. A second message
    is added 20 ms into that handling; the result is its read time minus its add time.
    """
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        fresh_group(client, stream)
        client.xadd(stream, {"n": "0"})
        read_at: dict[str, float] = {}
        done = threading.Event()
        loop = threading.Thread(target=_loop, args=(redis_url, stream, work_ms, inline, read_at, done), daemon=True)
        loop.start()
        poll(lambda: len(read_at) == 1, timeout_s=5)
        time.sleep(0.02)  # 20 ms into the handling of the first message
        added_at = time.monotonic()
        second = str(client.xadd(stream, {"n": "1"}))
        loop.join(timeout=10 + work_ms / 1000)
        done.set()
        return (read_at[second] - added_at) * 1000


def _loop(
    redis_url: str, stream: str, work_ms: int, inline: bool, read_at: dict[str, float], done: threading.Event
) -> None:
    with (
        contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        while len(read_at) < 2 and not done.is_set():
            ids = entry_ids(client.xreadgroup(GROUP, "loop", {stream: ">"}, count=1, block=100))
            for msg_id in ids:
                read_at[msg_id] = time.monotonic()
                if inline:
                    _work(client, stream, msg_id, work_ms)
                else:
                    pool.submit(_work, client, stream, msg_id, work_ms)


def _work(client: redis.Redis, stream: str, msg_id: str, work_ms: int) -> None:
    time.sleep(work_ms / 1000)
    client.xack(stream, GROUP, msg_id)


@dataclass(frozen=True)
class HeldAtCrash:
    """What a consumer held (its PEL) when it died, and the largest PEL seen before."""

    count: int
    read_ahead: bool
    handled: int
    held_at_crash: int
    max_pel: int


def work_held_at_crash(
    redis_url: str,
    stream: str,
    *,
    count: int,
    read_ahead: bool,
    entries: int = 200,
    work_ms: int = 20,
    crash_after_handled: int = 10,
) -> HeldAtCrash:
    """Run one consumer on ``entries`` entries; it "crashes" (no more work, no acks) after N handled.

    ``read_ahead=False``: read ``COUNT``, handle each, ``XACK`` each, read again.
    ``read_ahead=True``: read ``COUNT``, hand each to a pool of 2 threads with an unbounded
    queue, read again at once. The PEL is sampled after every read. ``work_ms`` is long beside a
    read's round trip (about 0.2 ms), so that the read-ahead loop runs far ahead of the work even
    on a loaded machine where the reading thread waits for a core.
    """
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        fresh_group(client, stream, entries)
        crashed = threading.Event()
        handled: list[str] = []
        max_pel = 0

        def handle(msg_id: str) -> None:
            if crashed.is_set():
                return  # the process is dead: nothing more gets done or acked
            time.sleep(work_ms / 1000)
            client.xack(stream, GROUP, msg_id)
            handled.append(msg_id)
            if len(handled) >= crash_after_handled:
                crashed.set()

        with ThreadPoolExecutor(max_workers=2) as pool:
            while not crashed.is_set():
                ids = entry_ids(client.xreadgroup(GROUP, "consumer", {stream: ">"}, count=count, block=50))
                max_pel = max(max_pel, _pel(client, stream))
                for msg_id in ids:
                    if read_ahead:
                        pool.submit(handle, msg_id)
                    else:
                        handle(msg_id)
            pool.shutdown(wait=True, cancel_futures=True)
        return HeldAtCrash(count, read_ahead, len(handled), _pel(client, stream), max_pel)


def _pel(client: redis.Redis, stream: str) -> int:
    return int(client.xpending(stream, GROUP)["pending"])


