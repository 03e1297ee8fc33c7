"""Connections: a client from a URL or through Sentinel, and how to tell errors apart.

The client retries connection errors and timeouts itself (redis-py ``Retry`` with a jittered
exponential backoff). Some errors that follow a failover or a restart are not retried by
redis-py, because they arrive as a plain ``ResponseError`` (UNBLOCKED, NOGROUP, LOADING ...):
:func:`classify` names them so the loops can back off, recreate the group or give up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypedDict, cast

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection, Connection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelManagedConnection
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import (
    BusyLoadingError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from solutions.settings import Address

RETRIES = 3
RETRY_BASE_S = 0.05
RETRY_CAP_S = 0.5
CONNECT_TIMEOUT_S = 2.0
# The one list of "not now, try again" replies. These three follow a failover or a restart and come
# back from redis-py as a plain ResponseError (no subclass of their own), so nothing retries them
# unless told: UNBLOCKED (a demoted master closes its blocked clients), LOADING, MASTERDOWN.
RETRY_REPLIES = ("UNBLOCKED", "LOADING", "MASTERDOWN")
# Every transient reply, for classifying an error: the three above and those redis-py has classes for.
TRANSIENT_REPLIES = (*RETRY_REPLIES, "READONLY", "TRYAGAIN", "CLUSTERDOWN", "BUSY ")

Client = aioredis.Redis
# What a Redis call raises when Redis (or the way to it), not our code, fails: redis-py's
# errors, and OSError for what it does not wrap (a socket error, asyncio's TimeoutError).
REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)

log = logging.getLogger(__name__)

PackedCommand = bytes | str | Iterable[bytes]  # what a connection's send_packed_command takes
# hiredis's stub types pack_command's argument as a 1-tuple (``Tuple[X]`` for ``Tuple[X, ...]``); it takes any
# number of arguments, and raises TypeError for a bytearray (HiredisPacking falls back on it).
hiredis_pack = cast(Callable[[tuple[EncodableT, ...]], bytes], hiredis.pack_command)


class Commands(Protocol):
    """Whatever sends a command with ``execute_command`` (a client, a node of a cluster), typed here:
    redis-py leaves ``execute_command`` unannotated. The reply is whatever Redis sent (RESP), so
    ``Any`` until the caller reads it."""

    def execute_command(self, *args: EncodableT, **options: Any) -> Awaitable[Any]: ...


def execute(client: Commands, *args: EncodableT) -> Awaitable[Any]:
    """``client.execute_command(*args)`` through :class:`Commands` (its reply: see there)."""
    return client.execute_command(*args)


class ClientOptions(TypedDict):
    """The keyword arguments every client here is made with."""

    socket_timeout: float
    socket_connect_timeout: float
    retry: Retry
    retry_on_error: list[type[Exception]]
    health_check_interval: int


def _client_options(socket_timeout_s: float) -> ClientOptions:
    return ClientOptions(
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(ExponentialWithJitterBackoff(cap=RETRY_CAP_S, base=RETRY_BASE_S), RETRIES),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, BusyLoadingError],
        health_check_interval=10,
    )


class HiredisPacking(AbstractConnection):
    """Packs commands with ``hiredis.pack_command`` (C) instead of redis-py's Python loop.

    redis-py's sync client already packs with hiredis when it is installed; ``redis.asyncio``
    8.1 still packs every argument in Python, joining a growing buffer once per argument. For
    an XACK of 100 ids that is about 110 us against hiredis's 22 us, about 1 us per message
    on the worker's hot path. The bytes sent are the same (tests/test_connection.py checks
    it); anything hiredis does not take (bytearray, a command name with a space such as
    ``CONFIG GET``, an encoding other than UTF-8) goes to redis-py's own packer.
    """

    def pack_command(self, *args: EncodableT) -> list[bytes]:
        first = args[0]
        one_word = " " not in first if type(first) is str else type(first) is bytes and b" " not in first
        if one_word and self.encoder.encoding == "utf-8":
            try:
                return [hiredis_pack(args)]
            except TypeError:
                pass  # redis-py's packer converts it or raises its own DataError
        return super().pack_command(*args)


class PackingConnection(HiredisPacking, Connection):
    """A plain TCP connection that packs with hiredis."""


class MasterFollowingConnection(HiredisPacking, SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels for the master on *every* reconnect.

    redis-py 8 reconnects a dropped connection inside its command retry loop through
    ``connect_check_health``, which reuses the last host and port and skips the Sentinel
    lookup (redis-py issue #3874). With a paused master that address still accepts TCP
    connections and never answers, so each retry waits out a whole socket timeout on the old
    master. Reconnecting through :meth:`connect` looks the master up first.
    """

    async def send_packed_command(self, command: PackedCommand, check_health: bool = True) -> None:
        if not self.is_connected:
            reconnect: Callable[[], Awaitable[None]] = self.connect  # redis-py leaves connect unannotated
            await reconnect()
        await super().send_packed_command(command, check_health)


class Direct:
    """One connection of the client's pool, kept for one caller's hot commands, sent without the
    client's per-command machinery.

    ``redis.asyncio`` 8.1 spends about 20 us of CPU on every ``execute_command`` around the
    round trip itself: a connection taken from the pool and given back, the retry wrapper, and
    its observability hooks (``record_operation_duration``), awaited even when nothing records.
    The worker sends two commands per batch on its hot path (the reader's ``XREADGROUP`` and
    the ``XACK`` of what was charged), so that is 0.4 us a message at ``COUNT 100``. A
    :class:`Direct` sends them on a connection it holds: ``send_command`` and
    ``read_response``, as ``execute_command`` does inside (same bytes, same parser, the same
    reconnect through :meth:`MasterFollowingConnection.send_packed_command` after a failover).

    What it keeps of the client's behaviour:

    - a connection error or timeout is handed to ``execute_command`` for the same command, so
      the client's retries with backoff still apply (read_response has already dropped the
      broken connection; the held one reconnects on its next use);
    - an error reply (NOGROUP, UNBLOCKED ...) is raised as it is, as the client raises it;
    - one command at a time on the held connection: a call that comes while another is on its
      way (two coalescers acking at once) goes through ``execute_command``.

    Only for a client whose ``execute_command`` is redis-py's own: a client that does more
    there (a shard's client follows MOVED and ASK and backs off through a failover, see
    :class:`solutions.cluster_router.ShardClient`) keeps every command going through it.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._conn: Connection | None = None
        self._busy = False
        self.enabled = type(client).execute_command is aioredis.Redis.execute_command

    async def call(self, *args: EncodableT) -> Any:  # the reply, as Redis sent it (see Commands)
        """The reply to ``args``, as ``client.execute_command(*args)`` without response callbacks."""
        if self._busy or not self.enabled:
            return await execute(self.client, *args)
        self._busy = True
        try:
            conn = self._conn
            if conn is None:
                take: Callable[[], Awaitable[Connection]] = self.client.connection_pool.get_connection  # unannotated
                conn = self._conn = await take()
            await conn.send_command(*args)
            return await conn.read_response()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            log.debug("direct %s failed (%s); the client retries it", args[0], describe(exc))
        finally:
            self._busy = False
        return await execute(self.client, *args)


def connect(
    *,
    redis_url: str,
    sentinels: tuple[Address, ...] = (),
    master_name: str = "mymaster",
    socket_timeout_s: float = 5.0,
) -> Client:
    """A client (bytes replies) for ``redis_url``, or for the master that Sentinel names.

    With Sentinel the pool asks the sentinels for the master on every new connection, so
    after a failover a reconnect lands on the new master (``SENTINEL GET-MASTER-ADDR-BY-NAME``).
    """
    options = _client_options(socket_timeout_s)
    if sentinels:
        make_sentinel: Callable[..., Sentinel] = Sentinel  # redis-py leaves Sentinel.__init__ unannotated
        sentinel = make_sentinel(
            list(sentinels),
            socket_timeout=CONNECT_TIMEOUT_S,
            sentinel_kwargs={
                "socket_timeout": CONNECT_TIMEOUT_S,
                "socket_connect_timeout": CONNECT_TIMEOUT_S,
            },
        )
        client: Client = sentinel.master_for(master_name, connection_class=MasterFollowingConnection, **options)
        return client
    # A unix:// or rediss:// URL picks its own connection class (and redis-py's packer).
    return aioredis.Redis.from_url(redis_url, connection_class=PackingConnection, **options)


def reply_code(exc: BaseException) -> str:
    """The first word of a Redis error reply (``NOGROUP``, ``UNBLOCKED`` ...), else ''."""
    text = str(exc).strip()
    return text.split(" ", 1)[0].upper() if text else ""


def is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and reply_code(exc) == "NOGROUP"


def is_busygroup(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and reply_code(exc) == "BUSYGROUP"


def classify(exc: BaseException) -> str:
    """``nogroup``, ``recoverable`` (back off and try again) or ``fatal`` (a bug or bad config).

    Recoverable: connection reset or refused, timeouts, READONLY (talking to a demoted
    master), UNBLOCKED (a demoted master closes its blocked clients), LOADING, MASTERDOWN,
    MasterNotFound (no sentinel knows a master yet).
    """
    if is_nogroup(exc):
        return "nogroup"
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | MasterNotFoundError | ReadOnlyError | OSError):
        return "recoverable"
    if isinstance(exc, ResponseError):
        text = str(exc).upper()
        return "recoverable" if text.startswith(TRANSIENT_REPLIES) else "fatal"
    if isinstance(exc, RedisError):
        return "recoverable"
    return "fatal"


def not_the_message(exc: BaseException) -> bool:
    """Redis refused for lack of memory (OOM under ``noeviction``) or could not answer
    (:func:`classify` says recoverable): whatever the call was for, the message is not at fault."""
    return isinstance(exc, OutOfMemoryError) or classify(exc) == "recoverable"


class Backoff:
    """Jittered exponential backoff for the loops: a few attempts a second at most, never a hot loop.

    The cap is short on purpose: a failover takes a couple of seconds, and a worker that is
    sleeping out a long backoff when the new master appears resumes late (with 0.5 s at
    most 4 attempts a second, and less than half a second lost after a promotion).
    """

    def __init__(self, *, base_s: float = 0.1, cap_s: float = 0.5) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0

    def reset(self) -> None:
        self.failures = 0

    def next_delay_s(self) -> float:
        """Grows from ``base_s`` to ``cap_s``; uniform jitter in [delay/2, delay]."""
        self.failures += 1
        delay = min(self.cap_s, self.base_s * 2 ** (self.failures - 1))
        return float(delay / 2 + random.random() * delay / 2)

    async def sleep(self, stop: asyncio.Event | None = None) -> None:
        """Sleep for the next delay, or less if ``stop`` is set meanwhile."""
        delay = self.next_delay_s()
        if stop is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


def describe(exc: BaseException) -> str:
    """``ConnectionError: Error 111 connecting to ...``: the class and the reason, on one line.

    redis-py 8's ``repr`` of its errors is only ``network:ConnectionError``, which hides the reason.
    """
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Streak:
    """Logs a run of failures as one line, a reminder every ``every_s``, and one line on recovery.

    A Redis that is down at start (or for a while) then reads as a few clear lines instead of
    a warning per retry.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        every_s: float = 30.0,
        level: int = logging.WARNING,
        action: str = "retrying with backoff",
    ) -> None:
        self.log = logger
        self.what = what
        self.action = action
        self.every_s = every_s
        self.level = level
        self.failures = 0
        self.first_at = 0.0
        self.logged_at = 0.0

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self.failures += 1
        if self.failures == 1:
            self.first_at = self.logged_at = now
            self.log.log(self.level, "%s failed, %s: %s", self.what, self.action, describe(exc))
        elif now - self.logged_at >= self.every_s:
            self.logged_at = now
            self.log.log(
                self.level, "%s still failing (%s attempts in %.0fs): %s", self.what, self.failures,
                now - self.first_at, describe(exc),
            )

    def recovered(self) -> None:
        if self.failures:
            self.log.info(
                "%s works again after %s failed attempts in %.1fs",
                self.what, self.failures, time.monotonic() - self.first_at,
            )
            self.failures = 0
