"""The slot map of a Redis Cluster (``CLUSTER SLOTS``) and a connection that follows a slot's owner.

:class:`SlotMap` says which master serves each of the 16384 slots; it is read at start, corrected
slot by slot by ``MOVED`` replies, and re-read (at most once per ``refresh_interval_s``) when a
node stops answering. :class:`SlotOwnerConnection` is a redis-py connection bound to one slot:
it connects to whichever master the map names for that slot at the moment it connects, and
reconnects when the map has changed since. :mod:`solutions.cluster_router` builds on both.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, MutableSet, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from solutions.connection import PackedCommand, PackingConnection, execute
from solutions.settings import Address, InputError

log = logging.getLogger(__name__)

SLOTS = 16384


class NotAClusterError(InputError):
    """A start-up node answers, but as a plain Redis: ``--cluster`` points at the wrong server."""


NOT_A_CLUSTER = "cluster support disabled"  # Redis 7's reply to CLUSTER SLOTS without cluster-enabled


@dataclass(frozen=True, kw_only=True)
class RoutingOptions:
    """How the shard clients connect and how long they keep trying through a failover."""

    socket_timeout_s: float = 5.0  # longer than any XREADGROUP BLOCK sent through them
    connect_timeout_s: float = 1.0
    retry_for_s: float = 30.0  # then the last error is raised to the caller
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 0.5
    max_redirects: int = 5  # MOVED in a row before backing off (a map still settling)
    refresh_interval_s: float = 0.1  # at most one CLUSTER SLOTS per interval, however many shards ask

    def __post_init__(self) -> None:
        if min(self.socket_timeout_s, self.connect_timeout_s, self.backoff_base_s) <= 0:
            raise ValueError("timeouts and the backoff base must be positive")
        if self.backoff_cap_s < self.backoff_base_s or self.retry_for_s < 0 or self.max_redirects < 1:
            raise ValueError("need backoff_cap_s >= backoff_base_s, retry_for_s >= 0, max_redirects >= 1")


class SlotMap:
    """Which master serves each slot, from ``CLUSTER SLOTS``; shared by the shard clients of a process."""

    def __init__(self, startup: Sequence[Address], options: RoutingOptions) -> None:
        if not startup:
            raise ValueError("a cluster needs at least one startup node")
        self.options = options
        self._startup = list(startup)
        self._owners: list[Address | None] = [None] * SLOTS
        self.watched: set[int] = set()  # slots whose change of master is logged (the shards' slots)
        self._nodes: dict[tuple[Address, bool], aioredis.Redis] = {}
        self._refreshed_at = float("-inf")
        self._lock: asyncio.Lock | None = None  # made on first use: never bind a loop in __init__

    def owner(self, slot: int) -> Address | None:
        return self._owners[slot]

    def owner_of(self, slot: int) -> Address:
        """The master of ``slot``; a ``ConnectionError`` (retried like one) while none is known."""
        if (addr := self._owners[slot]) is None:
            raise RedisConnectionError(f"no master known for slot {slot} (the slot map is empty or the slot unserved)")
        return addr

    def masters(self) -> dict[Address, list[tuple[int, int]]]:
        """Each master's slot ranges, in slot order."""
        ranges: dict[Address, list[tuple[int, int]]] = {}
        start = 0
        for slot in range(1, SLOTS + 1):
            if slot == SLOTS or self._owners[slot] != self._owners[start]:
                if (addr := self._owners[start]) is not None:
                    ranges.setdefault(addr, []).append((start, slot - 1))
                start = slot
        return ranges

    def moved(self, slot: int, addr: Address) -> None:
        """A ``MOVED`` reply: ``slot`` is served by ``addr`` now."""
        if self._owners[slot] != addr:
            log.info("slot %s moved: %s -> %s (MOVED)", slot, _shown(self._owners[slot]), _shown(addr))
            self._owners[slot] = addr

    def node(self, addr: Address, *, probe: bool = False) -> aioredis.Redis:
        """A plain client of one node, made once per address: for ``ASKING`` + a command, or a ``probe``.

        A probe (``CLUSTER SLOTS``) waits at most ``connect_timeout_s`` for its answer, so that a
        master that hangs (paused, swapping) costs a refresh one short timeout, not a socket timeout.
        """
        if (addr, probe) not in self._nodes:
            pool = ConnectionPool(
                connection_class=PackingConnection,
                host=addr[0],
                port=addr[1],
                socket_timeout=self.options.connect_timeout_s if probe else self.options.socket_timeout_s,
                socket_connect_timeout=self.options.connect_timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
            self._nodes[addr, probe] = aioredis.Redis.from_pool(pool)
        return self._nodes[addr, probe]

    async def refresh(self, *, required: bool = False) -> bool:
        """``CLUSTER SLOTS`` from the first node that answers (known masters first); at most once per interval.

        Returns whether the map was read. With ``required`` a cluster where no node answers
        raises the last error (for start-up: one clear error instead of a silent empty map).
        """
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if time.monotonic() - self._refreshed_at < self.options.refresh_interval_s:
                return False
            self._refreshed_at = time.monotonic()
            last: Exception | None = None
            # the masters in slot order (as masters() has them, without building their ranges), then the start-up nodes
            known = (a for a in self._owners if a is not None)
            for addr in dict.fromkeys([*dict.fromkeys(known), *self._startup]):
                try:
                    reply = await execute(self.node(addr, probe=True), "CLUSTER", "SLOTS")
                except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
                    last = exc
                    continue
                self._apply(reply, addr)
                return True
        if required and last is not None:
            if isinstance(last, ResponseError) and NOT_A_CLUSTER in str(last):
                raise NotAClusterError(f"{', '.join(f'{h}:{p}' for h, p in self._startup)} is not a cluster "
                                       f"node (CLUSTER SLOTS: {last}); give --cluster a node of a Redis Cluster")
            raise last
        return False

    def _apply(self, reply: list[Any], asked: Address) -> None:
        owners: list[Address | None] = [None] * SLOTS
        for entry in reply:
            lo, hi, master = int(entry[0]), int(entry[1]), entry[2]
            host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
            addr = (host or asked[0], int(master[1]))
            owners[lo : hi + 1] = [addr] * (hi - lo + 1)
        for slot in sorted(self.watched):
            old, new = self._owners[slot], owners[slot]
            if old is not None and new != old:
                log.info("slot %s moved: %s -> %s (CLUSTER SLOTS)", slot, _shown(old), _shown(new))
        self._owners = owners

    async def aclose(self) -> None:
        for client in self._nodes.values():
            await client.aclose()
        self._nodes.clear()


class SlotOwnerConnection(PackingConnection):
    """A connection that (re)connects to whichever master owns its slot at that moment.

    Before each send it compares its address with the slot map; after a ``MOVED`` updated the
    map, a connection still open to the old owner is closed and reopened to the new one.
    """

    def __init__(
        self, *, owner: Callable[[], Address], registry: MutableSet[SlotOwnerConnection] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._owner = owner
        if registry is not None:
            registry.add(self)  # the shard client's list of its connections (a WeakSet)

    @property
    def stale(self) -> bool:
        """Connected to a node that no longer owns the slot (as far as the map knows)."""
        try:
            return self.is_connected and (self.host, self.port) != self._owner()
        except RedisConnectionError:
            return False

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected:
            self.host, self.port = self._owner()
        await super().connect_check_health(check_health, retry_socket_connect)

    async def send_packed_command(self, command: PackedCommand, check_health: bool = True) -> None:
        if self.is_connected and (self.host, self.port) != self._owner():
            await self.disconnect()
        await super().send_packed_command(command, check_health)


def _shown(addr: Address | None) -> str:
    return f"{addr[0]}:{addr[1]}" if addr else "nobody"
