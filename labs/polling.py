"""Waiting for a condition with a deadline: the one polling rule of the labs, experiments and tests.

Every wait for something a fault, a process or Redis must do first is a poll with a deadline,
never a sleep and a hope. One name per meaning, and an ``_async`` twin for each that runs inside
an event loop (the worker's tasks go on between polls):

- :func:`wait_until` / :func:`wait_until_async`: poll ``predicate`` until it is truthy and return
  that value, else raise (:class:`TimeoutError` by default, ``error=`` for another type) with a
  message naming what it waited for;
- :func:`poll` / :func:`poll_async`: the same without the error: True once the predicate held,
  False at the deadline;
- :func:`poll_value` / :func:`poll_value_async`: read a value until ``done(value)`` or the
  deadline, and return the last value read either way (the caller judges it);
- :func:`every`: a loop body run every ``period_s`` for ``for_s`` seconds or until a ``stop``
  event (a watch, a load that runs for its duration): the loop's clock lives here, not in the caller;
- :func:`seconds_left`: what is left of an absolute ``time.monotonic()`` deadline handed down
  by a caller.

``until`` is the old name of :func:`wait_until_async`, kept only for ``tests/billing_support.py``
(which re-exports it to the worker's tests); it is deprecated: write ``wait_until_async``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

What = str | Callable[[], str]
"""What a wait waits for, in words; a callable is asked at the deadline (it may name the last state seen)."""

__all__ = [
    "every",
    "poll",
    "poll_async",
    "poll_value",
    "poll_value_async",
    "seconds_left",
    "until",
    "wait_until",
    "wait_until_async",
]


def _timed_out(timeout_s: float, what: What, error: Callable[[str], Exception]) -> Exception:
    text = what() if callable(what) else what
    return error(f"timed out after {timeout_s:g} s waiting for {text}")


def seconds_left(deadline: float) -> float:
    """What is left (never below 0) of ``deadline``, a point on the ``time.monotonic()`` clock."""
    return max(0.0, deadline - time.monotonic())


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: What,
    poll_s: float = 0.05,
    ignoring: tuple[type[Exception], ...] = (),
    error: Callable[[str], Exception] = TimeoutError,
) -> T:
    """Poll until ``predicate()`` is truthy and return it; ``error`` (a :class:`TimeoutError` by
    default) naming ``what`` otherwise.

    Exceptions listed in ``ignoring`` count as "not yet" (an endpoint that is still starting); an
    exception the predicate raises otherwise ends the wait (a process that died while awaited).
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
            raise _timed_out(timeout_s, what, error)
        time.sleep(poll_s)


def poll(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.01) -> bool:
    """Call ``predicate`` until it is truthy or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


def poll_value(read: Callable[[], T], done: Callable[[T], object], timeout_s: float, poll_s: float = 0.05) -> T:
    """Call ``read`` until ``done(value)`` holds or ``timeout_s`` passes; the last value read."""
    deadline = time.monotonic() + timeout_s
    while not done(value := read()) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return value


def every(
    period_s: float | Callable[[], float],
    for_s: float,
    stop: threading.Event | None = None,
    *,
    catch_up: bool = False,
) -> Iterator[float]:
    """Yield the seconds elapsed, pausing ``period_s`` after each body, for ``for_s`` seconds or until
    ``stop`` is set (it also cuts a pause short).

    The pause comes after the body whatever the body took (what is looked at gets that time to
    run); with ``catch_up`` the values are due on a schedule instead, one period after the one
    before, so a slow body is made up for by a shorter pause (a writer at a set rate). A callable
    ``period_s`` is asked after each body (a backoff after failures). ``break`` ends the loop early,
    as in any ``for``; a ``for ... else`` runs its ``else`` when the time was up or ``stop`` was set.
    """
    started = next_at = time.monotonic()
    while (elapsed_s := time.monotonic() - started) < for_s and not (stop is not None and stop.is_set()):
        yield elapsed_s
        period = period_s() if callable(period_s) else period_s
        next_at = next_at + period if catch_up else time.monotonic() + period
        pause_s = min(next_at, started + for_s) - time.monotonic()
        if pause_s > 0:
            if stop is None:
                time.sleep(pause_s)
            else:
                stop.wait(pause_s)


async def _call(predicate: Callable[[], T], in_thread: bool) -> T:
    return await asyncio.to_thread(predicate) if in_thread else predicate()


async def wait_until_async(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: What,
    poll_s: float = 0.02,
    *,
    in_thread: bool = False,
    ignoring: tuple[type[Exception], ...] = (),
    error: Callable[[str], Exception] = TimeoutError,
) -> T:
    """:func:`wait_until` inside an event loop; ``in_thread`` runs a predicate that queries Redis or
    SQLite in a thread."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = await _call(predicate, in_thread)
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what, error)
        await asyncio.sleep(poll_s)


async def poll_async(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.05, *,
                     in_thread: bool = True) -> bool:
    """:func:`poll` inside an event loop; by default the predicate runs in a thread (it may query
    Redis or the ledger while the worker's tasks go on)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await _call(predicate, in_thread):
            return True
        await asyncio.sleep(poll_s)
    return bool(await _call(predicate, in_thread))


async def poll_value_async(read: Callable[[], Awaitable[T]], done: Callable[[T], object], timeout_s: float,
                           poll_s: float = 0.05) -> T:
    """:func:`poll_value` inside an event loop, for a ``read`` that is a coroutine function (an
    asyncio Redis client's command); the last value read."""
    deadline = time.monotonic() + timeout_s
    while not done(value := await read()) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
    return value


until = wait_until_async
"""Deprecated: the old name of :func:`wait_until_async` (used through ``tests/billing_support.py``)."""
