"""The shards of a stream on Redis Cluster as a :class:`~solutions.site.Site`: one part per shard.

``billing-worker --cluster HOST:PORT --shards N`` runs the worker on this site. On a cluster a
stream ``orders`` is N keys ``orders:{<tag>}`` (:mod:`solutions.shards`), each in its own slot,
spread over the masters. The site:

- connects one :class:`~solutions.cluster_router.ClusterRouter` (a slot map, no ``COMMAND
  GETKEYS``), retrying with backoff and one log line while no node answers;
- takes the shard set from ``<stream>:shards`` (:func:`~solutions.shards.ensure_shards`: written
  once by the first process, so a worker asking for another N stops with one clear line);
- gives each shard its client (every command to the master of its slot, MOVED / ASK / a failover
  followed, CLUSTERDOWN and a dead master waited out with backoff and one log line each way) and
  settings with the stream set to the shard (so its DLQ, rescuer lease and dedupe markers carry its
  hash tag and every script stays in its slot), read by a :class:`ShardReader`;
- runs ``router.watch()`` beside the parts, so a read blocked on a master that hangs moves to the
  promoted replica at once.

The worker gives each part a pool of its own: while one shard's master is dead, that shard's runs
wait in their XACK (the router retries it for ``retry_for_s``) and its reader waits in
XREADGROUP; in a pool shared by every shard those runs would fill the room the other shards'
readers wait for. ``--parallelism`` is therefore per shard.

Per-key order: the producer puts every event of an order in one shard (``shard_of(order_id)``), and
the shard's pipeline runs the events of one ``order_id`` one after another in stream order. There
is no order *between* shards, and none is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.exceptions import RedisError

from solutions.cluster_router import ClusterRouter, RoutingOptions, ShardClient
from solutions.connection import Backoff, Streak
from solutions.reader import OWN_PENDING, Reader
from solutions.settings import Settings
from solutions.shards import ShardCountError, ShardSet, ensure_shards, shard_settings
from solutions.site import Place, Site, Watcher

log = logging.getLogger(__name__)


class ShardReader(Reader):
    """A :class:`Reader` on a shard client, which rides out a failover *inside* one call.

    The plain reader re-reads its own pending entries after an error, since a lost reply may
    have delivered some. The shard client retries a failed XREADGROUP itself (to the promoted
    replica), so the reader never sees that error: after a call the client had to retry, it
    goes back to its own pending entries the same way.
    """

    async def read_once(self) -> None:
        client = self.client
        before = client.failed_attempts if isinstance(client, ShardClient) else 0
        await super().read_once()
        if isinstance(client, ShardClient) and client.failed_attempts != before:
            self.cursor = OWN_PENDING


class ClusterSite(Site):
    """Every shard of ``settings.stream`` on the cluster ``settings.cluster`` names."""

    def __init__(self, settings: Settings, routing: RoutingOptions | None = None, *,
                 wait_for_cluster: bool = True) -> None:
        if not settings.cluster:
            raise ValueError("a cluster site needs settings.cluster (a startup node)")
        self.settings = settings
        self.routing = routing or RoutingOptions(socket_timeout_s=settings.socket_timeout_s)
        self.wait_for_cluster = wait_for_cluster  # False: no node answering is an error at once (the producer's)
        self.router: ClusterRouter | None = None
        self.shard_set: ShardSet | None = None

    async def open(self, stop: asyncio.Event) -> bool:
        """The router and the shard set, retried with backoff while the cluster does not answer
        (unless ``wait_for_cluster`` is False: then the error is raised at once).

        Raises :class:`~solutions.shards.ShardCountError` when the stream already has another
        number of shards (a setting to fix, not a fault to wait out).
        """
        s = self.settings
        streak = Streak(log, f"connecting to the cluster at {', '.join(f'{h}:{p}' for h, p in s.cluster)}")
        backoff = Backoff(base_s=0.2, cap_s=2.0)
        while not stop.is_set():
            try:
                self.router = self.router or await ClusterRouter.connect(s.cluster, self.routing)
                self.shard_set = await ensure_shards(self.router, s.stream, s.shards)
            except ShardCountError:
                raise
            except (RedisError, OSError) as exc:
                if not self.wait_for_cluster:
                    raise
                streak.failed(exc)
                await backoff.sleep(stop)
                continue
            streak.recovered()
            return True
        return False

    def places(self) -> list[Place]:
        router, shard_set = self.router, self.shard_set
        assert router is not None and shard_set is not None, "open() first"
        return [Place(router.client(name), shard_settings(self.settings, name), i, ShardReader)
                for i, name in enumerate(shard_set.names)]

    def watchers(self) -> list[Watcher]:
        assert self.router is not None, "open() first"
        return [("cluster-watch", self.router.watch())]

    def describe(self, settings: Settings) -> str:
        router, shard_set = self.router, self.shard_set
        assert router is not None and shard_set is not None
        owners = ", ".join(f"{name}@{_owner(router, name)}" for name in shard_set.names)
        return f"{len(shard_set.names)} shards of {settings.stream}: {owners}"

    async def aclose(self) -> None:
        if self.router is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.router.aclose()


def _owner(router: ClusterRouter, key: str) -> str:
    addr = router.owner(key)
    return f"{addr[0]}:{addr[1]}" if addr else "?"
