"""Listen to Sentinel's ``+switch-master`` and drop the connections to the old master at once.

Why: a master that is *paused* (SIGSTOP, a partition, a long stall) is not a dead one. Its TCP
port still accepts connections (the kernel completes the handshake) and the commands already
sent on open connections simply get no reply. A client that waits for its socket timeout
(BLOCK + a margin) and then retries a few times on the same stalled address sits out many
seconds after Sentinel has already promoted a replica. A killed master, by contrast, resets
every connection, and the client reconnects through Sentinel at once.

Each sentinel publishes ``+switch-master <name> <old-ip> <old-port> <new-ip> <new-port>`` on
its Pub/Sub when the failover is decided. :class:`FailoverWatch` subscribes on every
sentinel; on the first announcement of a new address for our master it disconnects all of the
client's pooled connections, idle and in use. A blocked ``XREADGROUP`` or an in-flight
``XACK`` then fails at once with a connection error, redis-py's ``Retry`` reconnects, and the
Sentinel-managed connection asks the sentinels for the master again: the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from solutions.connection import CONNECT_TIMEOUT_S, Backoff, Client
from solutions.settings import Address

log = logging.getLogger(__name__)

SWITCH_CHANNEL = "+switch-master"
PubSubData = bytes | str | int | None  # a value of a Pub/Sub message (its channel, its data, a count)


def parse_switch(data: PubSubData) -> tuple[str, Address, Address] | None:
    """``(name, old, new)`` from a ``+switch-master`` payload; None when it does not parse."""
    text = data.decode() if isinstance(data, bytes) else str(data)
    parts = text.split()
    if len(parts) != 5 or not parts[2].isdigit() or not parts[4].isdigit():
        return None
    return parts[0], (parts[1], int(parts[2])), (parts[3], int(parts[4]))


class FailoverWatch:
    """Watches the sentinels for a new master of ``master_name`` and resets ``client``'s pool."""

    def __init__(self, client: Client, sentinels: tuple[Address, ...], master_name: str) -> None:
        self.client = client
        self.sentinels = sentinels
        self.master_name = master_name
        self.current: Address | None = None
        self.switches = 0
        self.subscribed = 0
        self.unexpected_errors = 0  # errors that are neither Redis's nor the network's (a bug)

    async def run(self) -> None:
        """Watch every sentinel until cancelled (a sentinel that is down is retried with backoff)."""
        if not self.sentinels:
            return
        await asyncio.gather(*(self._watch(address) for address in self.sentinels))

    async def _watch(self, address: Address) -> None:
        backoff = Backoff(base_s=0.2, cap_s=2.0)
        while True:
            subscriber = aioredis.Redis(
                host=address[0],
                port=address[1],
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0),
            )
            try:
                await self._listen(subscriber)
            except (RedisError, OSError) as exc:  # a sentinel down or restarting: expected, retried quietly
                log.debug("sentinel %s:%s pub/sub failed, retrying: %r", *address, exc)
                await backoff.sleep()
            except Exception as exc:  # a bug must not end the watch, nor hide: WARNING once, then DEBUG
                self._unexpected(address, exc)
                await backoff.sleep()
            else:
                backoff.reset()
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await subscriber.aclose()

    def _unexpected(self, address: Address, exc: Exception) -> None:
        """An error no sentinel outage explains: logged at WARNING the first time, then at DEBUG."""
        self.unexpected_errors += 1
        if self.unexpected_errors == 1:
            log.warning("sentinel %s:%s pub/sub: unexpected error, still watching (logged once): %r",
                        *address, exc, exc_info=exc)
        else:
            log.debug("sentinel %s:%s pub/sub: unexpected error again: %r", *address, exc)

    async def _listen(self, subscriber: Client) -> None:
        async with subscriber.pubsub() as pubsub:
            await pubsub.subscribe(SWITCH_CHANNEL)
            self.subscribed += 1
            try:
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        await self.on_message(message)
            finally:
                self.subscribed -= 1

    async def on_message(self, message: Mapping[str, PubSubData]) -> bool:
        """Handle one Pub/Sub message; True when it made us drop the connections."""
        switch = parse_switch(message.get("data"))
        if switch is None or switch[0] != self.master_name or switch[2] == self.current:
            return False
        name, old, new = switch
        self.current = new
        self.switches += 1
        log.warning(
            "sentinel: +switch-master %s %s:%s -> %s:%s; dropping connections to reconnect to the new master",
            name, *old, *new,
        )
        try:
            await self.client.connection_pool.disconnect(inuse_connections=True)
        except Exception as exc:  # a connection that fails to close is closed anyway
            log.debug("disconnect after +switch-master: %r", exc)
        return True
