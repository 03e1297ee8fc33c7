"""Redis Cluster routing for sharded streams: each shard's commands go straight to the master of its slot.

A shard (``orders:{0}``) is one key, so one slot, so one master at a time. :class:`ClusterRouter`
keeps the slot map of the cluster (:class:`~solutions.slot_map.SlotMap`) and hands out one
:class:`ShardClient` per slot: a ``redis.asyncio.Redis`` whose connections connect to whichever master owns that slot
*now*. Every redis-py method works on it unchanged (XREADGROUP, XACK, XAUTOCLAIM, registered
scripts, pipelines), so the worker's reader, rescuer and acks take a shard client as their
client.

Why not redis-py's ``RedisCluster``: XREADGROUP is flagged ``movablekeys`` (its keys follow
``STREAMS``), so ``RedisCluster`` asks a node ``COMMAND GETKEYS`` before every XREADGROUP to
learn its slot, and redis-py 8.1 asks twice (once to pick a policy, once to pick the node): three
round trips instead of one, all of the extra ones to a single node
(:mod:`labs.experiments.cluster_routing` measures it). A shard's slot is known before the first
command, so nothing here ever asks.

What happens on the way:

- ``MOVED`` (a failover or a finished reshard): the map learns the new owner of that slot;
  connections to the old owner are dropped when next used; the command is sent again at once.
- ``ASK`` (the key has already moved in a reshard that is still running): ``ASKING`` and the
  command go in one pipeline to the importing node; the map does not change.
- ``CLUSTERDOWN``, ``TRYAGAIN``, ``UNBLOCKED``, ``LOADING``, connection errors and timeouts (a
  master killed, its replica not promoted yet): jittered exponential backoff, the map refreshed
  from ``CLUSTER SLOTS``, the command sent again, for up to ``retry_for_s``, after which the last
  error is raised. One log line when a shard's trouble starts (and a reminder every 30 s), one
  when it ends: never one per attempt.
- A master that hangs instead of dying keeps its connections open and silent: run
  :meth:`ClusterRouter.watch` beside the readers, and once the cluster has promoted the replica
  the connections to the old master are closed, so a blocked XREADGROUP moves at once instead
  of sitting out its socket timeout.

For the sharded worker: one router per process (``await ClusterRouter.connect(nodes)``), the
shard set from :func:`solutions.shards.ensure_shards`, and per shard ``router.client(name)`` as
the client of that shard's reader, rescuer and acks, with settings from
:func:`solutions.shards.shard_settings` (the stream set to the shard's name, so its DLQ, lease
and markers share its slot); ``router.watch()`` as one more task.

As with redis-py's own ``Retry``, a command whose connection broke after it was sent may be
sent twice; the worker's commands are safe to repeat (reads, XACK, its scripts), and a
producer that must know counts such a send as of unknown outcome.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterDownError, MovedError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from solutions.connection import RETRY_REPLIES, Backoff, Streak, reply_code
from solutions.settings import Address
from solutions.slot_map import RoutingOptions, SlotMap, SlotOwnerConnection

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRIED = (ClusterDownError, TryAgainError, RedisConnectionError, RedisTimeoutError)
Ask = tuple[tuple[object, ...], dict[str, object]]

__all__ = ["ClusterRouter", "RoutingOptions", "ShardClient", "ShardPipeline"]


def retried(exc: BaseException) -> bool:
    """Errors that mean "not now, try again": the cluster is moving, not the command wrong."""
    if isinstance(exc, RETRIED):
        return True
    return isinstance(exc, ResponseError) and reply_code(exc) in RETRY_REPLIES


class ShardClient(aioredis.Redis):
    """A ``redis.asyncio.Redis`` for the keys of one slot, always talking to that slot's master."""

    def __init__(self, slot_map: SlotMap, slot: int, *, name: str) -> None:
        opts = slot_map.options
        self.connections: weakref.WeakSet[SlotOwnerConnection] = weakref.WeakSet()
        pool = ConnectionPool(
            connection_class=SlotOwnerConnection,
            owner=functools.partial(slot_map.owner_of, slot),
            registry=self.connections,
            socket_timeout=opts.socket_timeout_s,
            socket_connect_timeout=opts.connect_timeout_s,
            retry=Retry(NoBackoff(), 0),  # one attempt per send: routed() decides what comes next
        )
        super().__init__(connection_pool=pool)
        self.auto_close_connection_pool = True
        self.slot = slot
        self.key = name  # the first key it was made for (a shard's name)
        self.slot_map = slot_map
        slot_map.watched.add(slot)
        self.streak = Streak(log, f"slot {slot} ({name})")
        self.failed_attempts = 0  # every attempt that failed and was retried or raised, ever (a reader compares)

    async def execute_command(self, *args: object, **options: object) -> object:
        """Any command, on the master of this client's slot (MOVED, ASK and failovers followed)."""
        parent: Callable[..., Awaitable[object]] = super().execute_command  # redis-py leaves it unannotated
        return await self.routed(lambda: parent(*args, **options), ask=(args, options))

    async def drop_stale_connections(self) -> int:
        """Close this shard's connections (idle or in use) to a node that no longer owns its slot.

        A command blocked on such a connection (an XREADGROUP on a master that hangs) fails at
        once with a connection error, and :meth:`routed` sends it again to the new master.
        """
        stale = [conn for conn in list(self.connections) if conn.stale]
        for conn in stale:
            await conn.disconnect()
        return len(stale)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> ShardPipeline:
        return ShardPipeline(self, transaction, shard_hint)

    async def routed(self, call: Callable[[], Awaitable[T]], *, ask: Ask | None = None) -> T:
        """Run ``call`` until it succeeds: redirects at once, trouble with backoff, for ``retry_for_s``.

        ``ask`` is the command itself, to resend with ``ASKING`` to an importing node (a
        pipeline passes none: it backs off until the migration of its slot has finished).
        """
        opts = self.slot_map.options
        deadline = time.monotonic() + opts.retry_for_s
        backoff = Backoff(base_s=opts.backoff_base_s, cap_s=opts.backoff_cap_s)
        redirects = 0
        asking: Address | None = None
        while True:
            target, asking = asking, None
            try:
                result = await (self._asking(target, ask) if target and ask else call())
            except MovedError as exc:
                self.slot_map.moved(self.slot, (exc.host, int(exc.port)))
                redirects += 1
                if redirects <= opts.max_redirects:
                    continue
                error: Exception = exc
            except AskError as exc:
                redirects += 1
                if ask is not None and redirects <= opts.max_redirects:
                    asking = (exc.host, int(exc.port))
                    continue
                error = exc
            except Exception as exc:
                if not retried(exc):
                    raise
                error = exc
            else:
                self.streak.recovered()
                return result
            self.streak.failed(error)
            self.failed_attempts += 1
            if time.monotonic() >= deadline:
                await self.slot_map.refresh()  # so that the caller's next command goes where the cluster says now
                raise error
            redirects = 0
            await backoff.sleep()
            await self.slot_map.refresh()

    async def _asking(self, addr: Address, ask: Ask) -> Any:  # the reply of whatever command was asked
        """``ASKING`` then the command, on one connection to the node importing the slot."""
        args, options = ask
        async with self.slot_map.node(addr).pipeline(transaction=False) as pipe:
            pipe.execute_command("ASKING")
            pipe.execute_command(*args, **options)
            replies = await pipe.execute()
        return replies[1]


class ShardPipeline(Pipeline):
    """A pipeline (or MULTI/EXEC) on one shard client, sent again as a whole when it was redirected.

    Every command of it must touch the shard's slot. A redirect or ``CLUSTERDOWN`` refuses
    the whole batch before any command runs, so sending it again is safe; a connection lost
    mid-batch leaves the outcome unknown, as with any pipeline.
    """

    def __init__(self, shard: ShardClient, transaction: bool, shard_hint: str | None) -> None:
        super().__init__(shard.connection_pool, shard.response_callbacks, transaction, shard_hint)
        self.shard = shard

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the batch until it runs on the slot's master; with ``raise_on_error=False`` a
        redirect or a ``CLUSTERDOWN`` in the replies is followed or waited out all the same, and
        if the router gives up, the replies come back with the refusal in place (as asked)."""
        if self.watching:
            return await super().execute(raise_on_error)
        stack, scripts, explicit = list(self.command_stack), set(self.scripts), self.explicit_transaction
        parent = super().execute
        last: list[Any] = []

        async def once() -> list[Any]:
            self.command_stack, self.scripts, self.explicit_transaction = list(stack), set(scripts), explicit
            replies: list[Any] = await parent(raise_on_error)
            for reply in replies if not raise_on_error else ():
                if isinstance(reply, Exception) and (isinstance(reply, AskError) or retried(reply)):
                    last[:] = replies
                    raise reply  # MOVED and ASK (AskError's subclass) are followed, the rest waited out
            return replies

        try:
            return await self.shard.routed(once)
        except Exception as exc:
            if any(exc is reply for reply in last):
                return last
            raise


class ClusterRouter:
    """One per process: the cluster's slot map and one :class:`ShardClient` per slot in use.

    >>> router = await ClusterRouter.connect([("127.0.0.1", 6400)])
    >>> shard = router.client("orders:{0}")          # XREADGROUP, XACK, scripts ... on its master
    >>> await shard.xadd("orders:{0}", {"order_id": "o-1"})
    >>> await router.aclose()
    """

    def __init__(self, startup: Sequence[Address], options: RoutingOptions | None = None) -> None:
        self.slot_map = SlotMap(startup, options or RoutingOptions())
        self._clients: dict[int, ShardClient] = {}

    @classmethod
    async def connect(cls, startup: Sequence[Address], options: RoutingOptions | None = None) -> ClusterRouter:
        """A router with its slot map read; raises the last error when no startup node answers."""
        router = cls(startup, options)
        await router.slot_map.refresh(required=True)
        return router

    def client(self, key: str) -> ShardClient:
        """The client for ``key``'s slot (one per slot, shared by every key with the same hash tag)."""
        slot = key_slot(key.encode())
        if slot not in self._clients:
            self._clients[slot] = ShardClient(self.slot_map, slot, name=key)
        return self._clients[slot]

    def owner(self, key: str) -> Address | None:
        """The master that serves ``key``'s slot, as far as the map knows now."""
        return self.slot_map.owner(key_slot(key.encode()))

    def masters(self) -> dict[Address, list[tuple[int, int]]]:
        """Each master's slot ranges, as the map knows them now."""
        return self.slot_map.masters()

    async def watch(self, *, interval_s: float = 0.5) -> None:
        """Re-read the slot map every ``interval_s`` and cut connections to replaced masters; until cancelled.

        A killed master resets its connections, so its clients notice at once; a master that
        hangs (SIGSTOP, a partition, a long stall) keeps them open and silent, and a blocked
        XREADGROUP would sit out its whole socket timeout after the cluster has promoted the
        replica. The cluster's counterpart of :class:`~solutions.failover_watch.FailoverWatch`.
        """
        while True:
            await asyncio.sleep(interval_s)
            await self.slot_map.refresh()
            for client in list(self._clients.values()):
                if dropped := await client.drop_stale_connections():
                    log.info("slot %s: closed %s connection(s) to its old master", client.slot, dropped)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        await self.slot_map.aclose()

    async def __aenter__(self) -> ClusterRouter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
