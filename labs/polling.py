"""Waiting for a condition with a deadline: the one polling rule of the labs, experiments and tests.

Every wait for something a fault, a process or Redis must do first is a poll with a deadline,
never a sleep and a hope:

- :func:`wait_until` polls ``predicate`` until it is truthy and returns that value, else raises
  :class:`TimeoutError` naming what it waited for;
- :func:`poll` is the same without the error: True once the predicate held, False at the deadline;
- :func:`until` and :func:`poll_async` are both inside an event loop (the worker's tasks run
  between polls); ``in_thread`` runs a predicate that queries Redis or SQLite in a thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["poll", "poll_async", "until", "wait_until"]


def _timed_out(timeout_s: float, what: str) -> TimeoutError:
    return TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    poll_s: float = 0.05,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Poll until ``predicate()`` is truthy and return it; :class:`TimeoutError` naming ``what`` otherwise.

    Exceptions listed in ``ignoring`` count as "not yet" (an endpoint that is still starting).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what)
        time.sleep(poll_s)


def poll(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.01) -> bool:
    """Call ``predicate`` until it is truthy or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


async def until(predicate: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.02, *,
                in_thread: bool = False) -> T:
    """:func:`wait_until` inside an event loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await asyncio.to_thread(predicate) if in_thread else predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what)
        await asyncio.sleep(poll_s)


async def poll_async(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.05, *,
                     in_thread: bool = True) -> bool:
    """:func:`poll` inside an event loop; by default the predicate runs in a thread (it may query
    Redis or the ledger while the worker's tasks go on)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(predicate) if in_thread else predicate():
            return True
        await asyncio.sleep(poll_s)
    return bool(await asyncio.to_thread(predicate) if in_thread else predicate())
