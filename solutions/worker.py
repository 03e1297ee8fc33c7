"""The worker: a reader, a rescuer and the message pipeline around one Redis client.

``await Worker(settings).run()`` runs until :meth:`Worker.request_stop` (or, with
``handle_signals=True``, SIGINT/SIGTERM). Then it stops reading and claiming, lets the
in-flight handlers finish within ``drain_timeout_s``, waits for the commits and XACKs on
their way (:meth:`~solutions.pipeline.Pipeline.settle`), never acks what was not done, logs one
line with ``drain complete`` and the counts (and the ids left pending if the deadline hit),
and returns a :class:`Summary`. Signal handling is opt-in so that the same worker runs as
asyncio tasks inside a notebook. The run and the drain are :class:`~solutions.lifecycle.Lifecycle`'s
(shared with the sharded worker); the stream's parts are a :class:`~solutions.stream_part.StreamPart`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

from solutions.connection import REDIS_ERRORS, Client, connect
from solutions.failover_watch import FailoverWatch
from solutions.handler import Handler, billing_handler
from solutions.ledger import Ledger
from solutions.lifecycle import SETTLE_MARGIN_S, Lifecycle, Summary
from solutions.metrics import Metrics, Snapshot
from solutions.pipeline import Pipeline
from solutions.pool import Pool
from solutions.reader import Reader
from solutions.rescuer import Rescuer
from solutions.settings import Settings
from solutions.stream_part import StreamPart, backlog, build_part, refresh_gauges

log = logging.getLogger(__name__)

__all__ = ["SETTLE_MARGIN_S", "Summary", "Worker", "backlog"]


class Worker(Lifecycle):
    """One consumer of ``settings.group`` on ``settings.stream``."""

    def __init__(
        self,
        settings: Settings,
        *,
        handler: Handler | None = None,
        client: Client | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        super().__init__(settings, ledger)
        self.handler: Handler = handler or billing_handler(settings)
        self.client = client
        self.metrics = Metrics(stream=settings.stream, group=settings.group, consumer=settings.consumer)
        self.pool = Pool(settings.parallelism)
        self.part: StreamPart | None = None
        self._client: Client | None = None

    @property
    def counts(self) -> Snapshot:
        return self.metrics.snapshot()

    @property
    def reader(self) -> Reader | None:
        return self.part.reader if self.part else None

    @property
    def rescuer(self) -> Rescuer | None:
        return self.part.rescuer if self.part else None

    @property
    def pipeline(self) -> Pipeline | None:
        return self.part.pipeline if self.part else None

    def stream_parts(self) -> list[StreamPart]:
        return [self.part] if self.part else []

    # -- the hooks of the run ------------------------------------------------------------

    async def _open(self, stop: asyncio.Event) -> bool:
        s = self.settings
        self._client = self.client or connect(
            redis_url=s.redis_url,
            sentinels=s.sentinels,
            master_name=s.master_name,
            socket_timeout_s=s.socket_timeout_s,
        )
        return True

    async def _start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Create the group if needed and start the reader, the rescuer and the metrics loop."""
        s, client = self.settings, self._client
        assert client is not None
        breaker = self._new_breaker(self.metrics, functools.partial(backlog, client, s))
        self.part = part = build_part(client, s, handler=self.handler, ledger=self.ledger, metrics=self.metrics,
                                      pool=self.pool, breaker=breaker)
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port, s.metrics_host)
        tasks = await self._start_part(part, stop)
        log.info(
            "worker %s reading %s as group %s (dedupe %s, parallelism %s, count %s)",
            s.consumer,
            s.stream,
            s.group,
            s.dedupe,
            s.parallelism,
            s.count,
        )
        tasks.append(asyncio.create_task(self._metrics_loop(stop), name="metrics"))
        if s.sentinels:  # on +switch-master, drop the connections to a stalled old master
            watch = FailoverWatch(client, s.sentinels, s.master_name)
            tasks.append(asyncio.create_task(watch.run(), name="failover-watch"))
        return tasks

    async def _close(self) -> None:
        # The signal handlers stay until the loop closes (asyncio.run removes them): a signal
        # that arrives after the drain, such as a second SIGTERM sent to the process group, is
        # logged by _on_signal instead of killing the process on its way out with -15.
        if self.client is None and self._client is not None:
            with contextlib.suppress(*REDIS_ERRORS):
                await self._client.aclose()

    async def _refresh_gauges(self) -> None:
        if self._client is not None:
            await self.refresh_gauges(self._client)

    async def refresh_gauges(self, client: Client) -> None:
        """``XINFO GROUPS``, ``XLEN`` and ``XRANGE - + COUNT 1`` in one pipeline -> the gauges."""
        await refresh_gauges(client, self.settings, self.metrics)
