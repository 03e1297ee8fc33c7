"""Group commit: many coroutines submit one item each, one flush serves them all.

The worker handles a batch of messages concurrently, and each of them ends with a Redis
write (an XACK, a dedupe marker) or a SQLite commit. Sending them one by one costs a round
trip per message; a :class:`Coalescer` queues the items and runs one flush (a pipeline, a
transaction) for everything queued so far, while later items wait for the next flush.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Batch ``submit`` calls into calls of ``flush(items) -> results`` (same order, same length).

    At most one flush runs at a time. If a flush raises, every item of that batch gets the
    exception, so the caller can treat it like a failed single call.
    """

    def __init__(self, name: str, flush: Callable[[list[T]], Awaitable[Sequence[R]]], *, max_batch: int = 512):
        self.name = name
        self._flush = flush
        self._max_batch = max_batch
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None
        self.flushes = 0

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait for the flush that carries it."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name=f"coalescer-{self.name}")
        # If the caller is cancelled the future is cancelled with it; the item is still
        # flushed with its batch and the result is dropped.
        return await future

    async def _run(self) -> None:
        # Let the other coroutines of the same batch reach submit() before the first flush.
        await asyncio.sleep(0)
        while self._queue:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            items = [item for item, _ in batch]
            try:
                results = await self._flush(items)
            except Exception as exc:
                log.debug("%s flush of %s items failed: %r", self.name, len(items), exc)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self.flushes += 1
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
