"""Stopping tasks whose cancellation may be swallowed.

On Python 3.11 ``asyncio.wait_for`` returns the inner result instead of raising when the cancel
arrives just as the inner future completes (CPython gh-86296, fixed in 3.12 by rebuilding
``wait_for`` on ``asyncio.timeout``), and redis-py 8.1 sends every command's bytes through it. A
task cancelled while a command is on its way can then carry on as if nothing had happened, and a
loop that runs "until cancelled" never ends. Seen here: the cluster's slot-map watch went on
after its worker's drain had cancelled it, once in about 160 drains, and the drain waited for it
forever (``CLUSTER SLOTS`` returned normally with the task's ``cancelling()`` at 1).

:func:`cancel_and_wait` is the answer for every "cancel, then await" in this package: it cancels
again a task that is still running a moment later, and gives up (saying which) after a bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
RECANCEL_AFTER_S = 1.0  # a task still running this long after its cancel is cancelled again


async def cancel_and_wait(tasks: Iterable[asyncio.Future[T]], timeout_s: float) -> set[asyncio.Future[T]]:
    """Cancel ``tasks`` and wait up to ``timeout_s`` for them to end, cancelling again every
    :data:`RECANCEL_AFTER_S` any that went on; the ones still running at the deadline (logged)."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    deadline = time.monotonic() + timeout_s
    rounds = 0
    while pending:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            break
        for task in pending:
            task.cancel()
        rounds += 1
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_AFTER_S, left_s))
        if pending and rounds == 1:
            log.debug("still running %.1fs after a cancel: %s", RECANCEL_AFTER_S, _names(pending))
    for task in _ended(tasks):
        task.exception()  # retrieved: a task's own error was its to log, not "never retrieved" at exit
    if pending:
        log.warning("still running %.1fs after %s cancels, left behind: %s", timeout_s, rounds, _names(pending))
    return pending


def _ended(tasks: Iterable[asyncio.Future[T]]) -> list[asyncio.Future[T]]:
    """The ones that ended other than by a cancel."""
    return [task for task in tasks if task.done() and not task.cancelled()]


def _names(tasks: Iterable[asyncio.Future[T]]) -> str:
    return ", ".join(sorted(t.get_name() if isinstance(t, asyncio.Task) else repr(t) for t in tasks))
