"""The read loop's errors (course module 3, section 3.1): which ones to wait out, and how.

The course's loop sleeps with a backoff on "network errors / failover". Its literal Python port,
``except redis.ConnectionError``, misses two of them, because in redis-py neither is a
``ConnectionError``:

- ``TimeoutError``: a socket timeout (a stalled master, a ``BLOCK`` past ``socket_timeout``);
- ``ReadOnlyError``: ``XREADGROUP`` is a *write* command (it moves the group's cursor and the
  PEL), so a replica, or a demoted master that a plain client still talks to, answers
  ``READONLY``.

A few more arrive as a plain ``ResponseError`` after a failover or a restart (``UNBLOCKED``,
``LOADING``, ``MASTERDOWN``). :func:`read_loop` waits all of them out with the reference
worker's jittered exponential :class:`~solutions.connection.Backoff` and lets everything else
(a bug, a bad config) raise. :func:`attempts_against_dead_port` and :func:`readonly_read`
measure it; :func:`automatic_retries` tells how often redis-py itself repeats a command,
which depends on how the client was made. Tests in ``tests/test_read_errors.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labs.experiments.read_loop import GROUP
from labs.launcher import ports
from solutions.connection import RETRY_REPLIES, Backoff

# Wait these out and read again; none of the last two is a redis.ConnectionError.
RETRY_READ: tuple[type[redis.RedisError], ...] = (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError)
# Replies that follow a failover or a restart and arrive as a plain ResponseError (the project's one list).
TRANSIENT_REPLIES = RETRY_REPLIES


def retryable(exc: BaseException) -> bool:
    """True for the errors :func:`read_loop` waits out (:data:`RETRY_READ`, :data:`TRANSIENT_REPLIES`)."""
    if isinstance(exc, RETRY_READ):
        return True
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(TRANSIENT_REPLIES)


def read_loop(
    client: redis.Redis,
    stream: str,
    consumer: str,
    handle: Callable[[str, dict[str, str]], None],
    *,
    stop: threading.Event,
    backoff: Backoff,
    count: int = 16,
    block_ms: int = 2000,
    on_error: Callable[[BaseException], None] = lambda exc: None,
) -> None:
    """``XREADGROUP ... COUNT count BLOCK block_ms STREAMS stream >`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            reply: Any = client.xreadgroup(GROUP, consumer, {stream: ">"}, count=count, block=block_ms)
        except redis.RedisError as exc:
            if not retryable(exc):
                raise  # a bug or a bad config (NOGROUP: the reference worker recreates the group)
            on_error(exc)
            stop.wait(backoff.next_delay_s())  # failover, dropped link, timeout, READONLY: a growing pause
            continue
        backoff.reset()
        for _stream, entries in reply:  # an empty reply on BLOCK is an empty list: read again
            for msg_id, fields in entries:
                handle(msg_id, fields)  # XACK only after the work succeeded, inside handle


def attempts_against_dead_port(duration_s: float, backoff: Backoff) -> list[float]:
    """Run :func:`read_loop` for ``duration_s`` against a port nobody listens on; the attempt times in s.

    redis-py's own retries are off, so each attempt is one refused connection.
    """
    client = redis.Redis(port=ports.free_port(), socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 0))
    started, stop = time.monotonic(), threading.Event()
    attempts: list[float] = []
    loop = threading.Thread(
        target=read_loop,
        args=(client, "orders", "reader", _ignore),
        kwargs={"stop": stop, "backoff": backoff, "on_error": lambda exc: attempts.append(time.monotonic())},
        daemon=True,
    )
    loop.start()
    time.sleep(duration_s)
    stop.set()
    loop.join(timeout=5)
    client.close()
    return [t - started for t in attempts if t - started <= duration_s]


def readonly_read(master: redis.Redis, replica: redis.Redis, stream: str, *, timeout_s: float = 5.0) -> str:
    """Create the group on ``master``, wait for ``replica`` to have it, ``XREADGROUP`` there: the error's name."""
    master.delete(stream)
    master.xgroup_create(stream, GROUP, id="0", mkstream=True)
    master.xadd(stream, {"order_id": "o-1"})
    if int(master.wait(1, int(timeout_s * 1000))) < 1:
        raise RuntimeError("the replica did not confirm the group")
    try:
        replica.xreadgroup(GROUP, "reader", {stream: ">"}, count=1)
    except redis.RedisError as exc:
        return type(exc).__name__
    return "ok"


def automatic_retries(client: redis.Redis) -> int:
    """How many times redis-py repeats a command that failed with a connection error or a timeout.

    Read off a fresh connection of the client's pool (``make_connection`` does not connect).
    """
    connection: Any = client.connection_pool.make_connection()
    return int(connection.retry.get_retries())


def _ignore(msg_id: str, fields: dict[str, str]) -> None:
    """A handler for loops that never get an entry."""
