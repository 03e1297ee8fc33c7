"""Where a worker's stream lives: a :class:`Site` opens the connections and names the parts to read.

The worker (:class:`~solutions.worker.Worker`) reads the same parts on every site, and the
producer (:mod:`solutions.producer`) writes to them, one sender per place; only the site knows
where they are:

- :class:`StreamSite`: one stream by URL or through Sentinel (one part: the stream itself, and a
  :class:`~solutions.failover_watch.FailoverWatch` beside it when Sentinel is used);
- :class:`~solutions.cluster_site.ClusterSite`: the shards of a stream on Redis Cluster, one part
  per shard, each on the client of its shard's slot, and the router's watch beside them.

This module imports nothing of the cluster, so a worker on one stream never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from dataclasses import dataclass

from solutions.connection import REDIS_ERRORS, Client, connect
from solutions.failover_watch import FailoverWatch
from solutions.reader import Reader
from solutions.settings import Settings

Watcher = tuple[str, Coroutine[object, object, None]]  # a task name and what it runs beside the parts


@dataclass(frozen=True)
class Place:
    """One part's place: its stream key, its client, its settings (``stream`` set to the key)."""

    client: Client
    settings: Settings
    shard_index: int | None = None  # None for a plain stream; a shard's index in its shard set
    reader_class: type[Reader] = Reader

    @property
    def name(self) -> str:
        return self.settings.stream


class Site(ABC):
    """Connections and the places of a worker's parts."""

    @abstractmethod
    async def open(self, stop: asyncio.Event) -> bool:
        """Connect (waiting out what a fault makes wait); False when ``stop`` came first."""

    @abstractmethod
    def places(self) -> list[Place]:
        """The parts to read (after :meth:`open`)."""

    @abstractmethod
    def watchers(self) -> list[Watcher]:
        """Tasks that run beside the parts (a failover watch)."""

    @abstractmethod
    def describe(self, settings: Settings) -> str:
        """What the start line says about where the worker reads."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close what :meth:`open` opened."""


class StreamSite(Site):
    """One stream on one Redis: ``settings.redis_url``, or the master of ``settings.sentinels``.

    A ``client`` given by the caller is used as it is and not closed. The socket timeout is
    ``socket_timeout_s``, by default the worker's (above its ``BLOCK``); the producer's is above
    its ``WAIT`` instead.
    """

    def __init__(self, settings: Settings, client: Client | None = None, *,
                 socket_timeout_s: float | None = None) -> None:
        if settings.cluster:
            raise ValueError("settings.cluster is set: use solutions.cluster_site.ClusterSite")
        self.settings = settings
        self.given = client
        self.client: Client | None = client
        self.socket_timeout_s = settings.socket_timeout_s if socket_timeout_s is None else socket_timeout_s

    async def open(self, stop: asyncio.Event) -> bool:
        s = self.settings
        self.client = self.given or connect(
            redis_url=s.redis_url,
            sentinels=s.sentinels,
            master_name=s.master_name,
            socket_timeout_s=self.socket_timeout_s,
        )
        return True

    def places(self) -> list[Place]:
        assert self.client is not None, "open() first"
        return [Place(self.client, self.settings)]

    def watchers(self) -> list[Watcher]:
        s = self.settings
        if not s.sentinels or self.client is None:
            return []
        # on +switch-master, drop the connections to a stalled old master
        return [("failover-watch", FailoverWatch(self.client, s.sentinels, s.master_name).run())]

    def describe(self, settings: Settings) -> str:
        return settings.stream

    async def aclose(self) -> None:
        if self.given is None and self.client is not None:
            with contextlib.suppress(*REDIS_ERRORS):
                await self.client.aclose()
