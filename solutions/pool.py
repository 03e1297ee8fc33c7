"""Bounded concurrency with per-key ordering.

Every message becomes a task. Tasks that share a lane key (the value of ``--order-key``,
``order_id`` by default) run one at a time in the order they were submitted, which is stream
order; tasks with different keys run in parallel.

Two limits, both deliberate: the reader bounds how many messages are in memory (``COUNT``
per read, and :meth:`Pool.wait_below` before each read), and :meth:`Pool.slot` (a semaphore
of ``parallelism``) bounds how many handlers do their work at once. The slot covers the
handler's work only, not the dedupe check, the ledger commit or the XACK around it: those
are batched across every message in hand, and holding a slot while waiting for a batch
would shrink every batch to ``parallelism``. A task waits for its lane predecessor before
it takes a slot, so waiting tasks never hold slots and lanes cannot deadlock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class Pool:
    """Run jobs with bounded concurrency, one at a time per lane key."""

    def __init__(self, parallelism: int) -> None:
        self.parallelism = parallelism
        self._slots: asyncio.Semaphore | None = None
        self._tails: dict[str, asyncio.Task[None]] = {}
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self._changed: asyncio.Event | None = None

    def _events(self) -> tuple[asyncio.Semaphore, asyncio.Event]:
        # Created on first use, inside the running loop (never in __init__).
        if self._slots is None or self._changed is None:
            self._slots = asyncio.Semaphore(self.parallelism)
            self._changed = asyncio.Event()
        return self._slots, self._changed

    def __len__(self) -> int:
        return len(self.in_flight)

    def submit(self, msg_id: str, lane: str | None, job: Job) -> bool:
        """Start ``job`` for ``msg_id``; False (and nothing started) if that id is already in flight."""
        if msg_id in self.in_flight:
            return False
        self.submit_batch([msg_id], {lane} if lane else set(), job)
        return True

    def submit_batch(self, msg_ids: list[str], lanes: set[str], job: Job) -> None:
        """Start one ``job`` for several messages; it waits for the tails of all ``lanes``."""
        self._events()
        previous = [tail for lane in lanes if (tail := self._tails.get(lane)) is not None]
        task = asyncio.create_task(self._run(previous, job), name=f"msg-{msg_ids[0]}")
        self.in_flight.update(dict.fromkeys(msg_ids, task))
        for lane in lanes:
            self._tails[lane] = task
        task.add_done_callback(lambda t: self._finished(msg_ids, lanes, t))

    async def _run(self, previous: list[asyncio.Task[None]], job: Job) -> None:
        for task in previous:
            if task.done():
                continue
            # Awaiting the task itself is the cheapest wait; the pool cancels tasks only at
            # the end of a drain, when cancelling a predecessor along with us is intended.
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # we are cancelled ourselves
            except Exception:
                pass  # the predecessor's failure is its own (logged in _finished)
        await job()

    def slot(self) -> asyncio.Semaphore:
        """The semaphore a handler holds while it works (``async with pool.slot(): ...``)."""
        slots, _ = self._events()
        return slots

    def _finished(self, msg_ids: list[str], lanes: set[str], task: asyncio.Task[None]) -> None:
        in_flight = self.in_flight
        for msg_id in msg_ids:
            in_flight.pop(msg_id, None)
        for lane in lanes:
            if self._tails.get(lane) is task:
                del self._tails[lane]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("job for %s raised %r (left pending, it will be redelivered)", ",".join(msg_ids), exc)
        _, changed = self._events()
        changed.set()

    async def wait_below(self, limit: int, stop: asyncio.Event | None = None) -> None:
        """Wait until fewer than ``limit`` jobs are in flight (or ``stop`` is set): backpressure."""
        _, changed = self._events()
        while len(self.in_flight) >= limit and not (stop and stop.is_set()):
            changed.clear()
            waiters = [asyncio.ensure_future(changed.wait())]
            if stop is not None:
                waiters.append(asyncio.ensure_future(stop.wait()))
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def drain(self, timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` for every job; cancel the rest and return their message ids."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                break
            await asyncio.wait(list(self.in_flight.values()), timeout=left_s)
        left = sorted(self.in_flight)
        tasks = list(self.in_flight.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        return left
