"""Group commit: many coroutines submit a few items each, one flush serves them all.

The pipeline runs several lanes of messages at once, and each lane ends with a Redis write
(a dedupe script, an XACK) and a SQLite commit. Sending them lane by lane costs a round trip
per lane; a :class:`Coalescer` queues the lanes' items and runs one flush (a script call, a
transaction) for everything queued so far, while later items wait for the next flush.

A flush runs in a task of the coalescer's own, so it finishes even when the coroutine that
asked for it is cancelled (a drain deadline): :meth:`Coalescer.wait_idle` is how shutdown
waits for every commit and XACK still on its way before it says ``drain complete``.

A coalescer given a ``now`` function (the ledger's commits: one that never waits, or says it
would) runs it in the caller's own task when nothing else is queued or on its way: the usual
case when a read batch is one run, where a task and a future for every commit cost more than
the commit's own Python (the ``billing-worker`` process, ``--dedupe none``: 4-9 % more messages
a second). It yields once first, as the flush task does, so that the reader sends its next
read before the commit. ``now`` does not wait, so nothing can cancel it halfway; when it
would have to wait (another process holds the ledger's lock), it returns None and the items
take the queue, as they always did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

Flush = Callable[[list[T]], Awaitable[Sequence[R]]]
FlushNow = Callable[[list[T]], Sequence[R] | None]  # the flush, if it can be done without waiting


class Coalescer(Generic[T, R]):
    """Batch ``submit(items)`` calls into calls of ``flush(all_items) -> results`` (same order, same length).

    At most one flush runs at a time. If a flush raises, every caller of that batch gets the
    exception, so each can treat it like a failed call of its own. An item counts as
    ``size(item)`` towards ``max_batch`` and :attr:`pending` (1 each by default; a batch of
    charges counts its charges).
    """

    def __init__(self, name: str, flush: Flush[T, R], *, max_batch: int = 512,
                 size: Callable[[T], int] | None = None, now: FlushNow[T, R] | None = None) -> None:
        self.name = name
        self._flush = flush
        self._now = now
        self._max_batch = max_batch
        self._size = size
        self._queue: list[tuple[list[T], asyncio.Future[list[R]]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._flushing = 0
        self.flushes = 0

    @property
    def pending(self) -> int:
        """How many items are queued or in the flush running now."""
        return self._flushing + sum(self._weight(items) for items, _ in self._queue)

    def _weight(self, items: list[T]) -> int:
        return len(items) if self._size is None else sum(map(self._size, items))

    @property
    def idle(self) -> bool:
        """True when nothing is queued and no flush is running."""
        return not self._queue and (self._runner is None or self._runner.done())

    async def submit(self, items: Sequence[T]) -> list[R]:
        """Queue ``items`` and wait for the flush that carries them; their results, in order.

        If the caller is cancelled, its future is cancelled with it; the items are still
        flushed with their batch and the result is dropped (a caller that must know it awaits
        :meth:`enqueue`'s future through ``asyncio.shield``)."""
        if not items:
            return []
        if self._now is not None and self.idle:
            await asyncio.sleep(0)  # as the flush task does: the reader and the other runs go first
            if self.idle:
                results = self._now(list(items))
                if results is not None:
                    self.flushes += 1
                    if len(results) != len(items):
                        raise ValueError(f"{self.name}: flush returned {len(results)} results for {len(items)} items")
                    return list(results)
        return await self.enqueue(items)

    def enqueue(self, items: Sequence[T]) -> asyncio.Future[list[R]]:
        """Queue ``items``; the future that the flush carrying them resolves."""
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        if not items:
            future.set_result([])
            return future
        self._queue.append((list(items), future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name=f"coalescer-{self.name}")
        return future

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the queued items to be flushed; True if idle."""
        runner = self._runner
        if runner is not None and not runner.done():
            await asyncio.wait([runner], timeout=timeout_s)
        return self.idle

    def _take(self) -> list[tuple[list[T], asyncio.Future[list[R]]]]:
        """The next batch: whole calls from the queue, up to ``max_batch`` items (at least one call)."""
        size = 0
        for n, (items, _) in enumerate(self._queue):
            size += self._weight(items)
            if size >= self._max_batch:
                batch, self._queue = self._queue[: n + 1], self._queue[n + 1 :]
                return batch
        batch, self._queue = self._queue, []
        return batch

    async def _run(self) -> None:
        # Let the other lanes that are ready in this loop iteration reach submit() first.
        await asyncio.sleep(0)
        while self._queue:
            batch = self._take()
            items = batch[0][0] if len(batch) == 1 else [item for call_items, _ in batch for item in call_items]
            self._flushing = self._weight(items)
            try:
                results = list(await self._flush(items))
                if len(results) != len(items):
                    raise ValueError(f"{self.name}: flush returned {len(results)} results for {len(items)} items")
            except Exception as exc:
                log.debug("%s flush of %s items failed: %r", self.name, len(items), exc)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self._flushing = 0
                self.flushes += 1
            if len(batch) == 1:
                if not batch[0][1].done():
                    batch[0][1].set_result(results)
                continue
            start = 0
            for call_items, future in batch:
                end = start + len(call_items)
                if not future.done():
                    future.set_result(results[start:end])
                start = end
