"""Bounded concurrency with per-key ordering, for runs of messages.

The pipeline starts one task per *run*: a read batch as a whole when the handler is instant,
else the messages of one lane key of a batch (the value of ``--order-key``, ``order_id`` by
default). A run holds a :class:`Turn` on its lanes: it waits for the runs before it on any of
its lanes (``await turn.wait()``) and lets the next ones go once its charges are recorded
(``turn.done()``), so the same key is worked on and charged in stream order, while different
keys run in parallel and the XACK of one run overlaps the work of the next.

Two limits, both deliberate: the reader bounds how many messages are in memory (``COUNT``
per read, and :meth:`Pool.wait_below` before each read), and :meth:`Pool.slot` (a semaphore
of ``parallelism``) bounds how many handlers do their work at once. The slot covers the
handler's work only, not the dedupe check, the ledger commit or the XACK around it: those are
batched across every run in hand. A run waits for its turn before it takes a slot, so waiting
runs never hold slots and lanes cannot deadlock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from solutions.cancelling import cancel_and_wait

log = logging.getLogger(__name__)


class Turn:
    """A run's place in line on its lanes."""

    __slots__ = ("_before", "_mine")

    def __init__(self, before: list[asyncio.Future[None]], mine: asyncio.Future[None]) -> None:
        self._before = before
        self._mine = mine

    async def wait(self) -> None:
        """Wait until every earlier run on our lanes called :meth:`done` (or ended)."""
        waiting = [future for future in self._before if not future.done()]
        if waiting:
            # asyncio.wait, not await: cancelling us must not cancel a predecessor's turn.
            await asyncio.wait(waiting)

    def done(self) -> None:
        """Let the next runs on our lanes go (idempotent)."""
        if not self._mine.done():
            self._mine.set_result(None)


Job = Callable[[Turn], Awaitable[None]]


class Pool:
    """Runs jobs as tasks, in line per lane, with ``parallelism`` work slots."""

    def __init__(self, parallelism: int) -> None:
        self.parallelism = parallelism
        self._slots: asyncio.Semaphore | None = None
        self._changed: asyncio.Event | None = None
        self._tails: dict[str, asyncio.Future[None]] = {}
        self.in_flight: dict[str, asyncio.Task[None]] = {}

    def _events(self) -> tuple[asyncio.Semaphore, asyncio.Event]:
        # Created on first use, inside the running loop (never in __init__).
        if self._slots is None or self._changed is None:
            self._slots = asyncio.Semaphore(self.parallelism)
            self._changed = asyncio.Event()
        return self._slots, self._changed

    def __len__(self) -> int:
        return len(self.in_flight)

    def slot(self) -> asyncio.Semaphore:
        """The semaphore a handler holds while it works (``async with pool.slot(): ...``)."""
        slots, _ = self._events()
        return slots

    def start(self, msg_ids: list[str], lanes: Iterable[str], job: Job) -> None:
        """Start ``job`` for the messages ``msg_ids``, in line behind the earlier runs on ``lanes``."""
        self._events()
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        before: list[asyncio.Future[None]] = []
        lanes = list(lanes)
        for lane in lanes:
            tail = self._tails.get(lane)
            if tail is not None and not tail.done():
                before.append(tail)
            self._tails[lane] = mine
        task = asyncio.create_task(self._run(job, Turn(before, mine)), name=f"run-{msg_ids[0]}")
        self.in_flight.update(dict.fromkeys(msg_ids, task))
        task.add_done_callback(functools.partial(self._finished, msg_ids, lanes, mine))

    @staticmethod
    async def _run(job: Job, turn: Turn) -> None:
        try:
            await job(turn)
        finally:
            turn.done()  # a run that failed or was cancelled must not hold its lanes

    def _finished(
        self, msg_ids: list[str], lanes: list[str], mine: asyncio.Future[None], task: asyncio.Task[None]
    ) -> None:
        for msg_id in msg_ids:
            self.in_flight.pop(msg_id, None)
        for lane in lanes:
            if self._tails.get(lane) is mine:
                del self._tails[lane]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("run of %s raised %r (left pending, it will be redelivered)", ",".join(msg_ids[:10]), exc)
        _, changed = self._events()
        changed.set()

    async def wait_below(self, limit: int, stop: asyncio.Event | None = None) -> None:
        """Wait until fewer than ``limit`` messages are in flight (or ``stop`` is set): backpressure.

        It wakes when a run ends or on :meth:`wake`, which whoever sets ``stop`` calls (one
        event to wait for: waiting for two takes a task each, about 0.5k instructions a message)."""
        _, changed = self._events()
        while len(self.in_flight) >= limit and not (stop and stop.is_set()):
            changed.clear()
            await changed.wait()

    def wake(self) -> None:
        """Wake :meth:`wait_below` to look again (after setting its ``stop``)."""
        _, changed = self._events()
        changed.set()

    async def drain(self, timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` for every run; cancel the rest and return their message ids."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                break
            await asyncio.wait(set(self.in_flight.values()), timeout=left_s)
        left = sorted(self.in_flight)
        await cancel_and_wait(set(self.in_flight.values()), 1.0)
        return left
