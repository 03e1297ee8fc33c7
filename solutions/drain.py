"""The drain: what a worker does between the stop and its return.

:func:`drain` stops the readers and rescuers (a short grace first, so that a read on its way
has its batch dispatched), closes the store's breaker, lets the in-flight handlers of every
stream part finish within ``drain_timeout_s``, waits for the commits and XACKs on their way
(:meth:`~solutions.pipeline.Pipeline.settle`), never acks what was not done, asks Redis what
is left in this consumer's PEL, gives up the rescuer leases, logs one line with
``drain complete`` and the counts (and the ids left pending if the deadline hit), and returns
a :class:`Summary`. :func:`drain_bound_s` is the longest all that can take, by its own timeouts.

The :class:`~solutions.worker.Worker` calls it once, from :meth:`~solutions.worker.Worker.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from solutions.cancelling import cancel_and_wait
from solutions.connection import REDIS_ERRORS, describe
from solutions.metrics import Snapshot
from solutions.reader import own_pending
from solutions.settings import Settings
from solutions.store_breaker import StoreBreaker
from solutions.stream_part import StreamPart

# The drain line is the worker's: the CLI's log and the tests read it under this logger's name.
log = logging.getLogger("solutions.worker")

SETTLE_MARGIN_S = 5.0  # at shutdown, a commit on its way gets the ledger's busy timeout plus this
LEFT_LISTED = 1000  # at most this many ids of what is left pending go into the drain line
LEFT_QUERY_TIMEOUT_S = 2.0
CANCEL_TIMEOUT_S = 5.0  # the readers, rescuers and watchers at the drain's start (solutions.cancelling)
# Before they are cancelled, the readers and rescuers get this long to end by themselves (each
# sees the stop at the top of its loop): an XREADGROUP or XAUTOCLAIM on its way when the stop
# came then has its batch dispatched and drained, instead of being cancelled after Redis had
# delivered it, which left the whole batch pending for another worker's min idle (about 1 stop
# in 75 under load, notebook 07). A BLOCK with nothing to read waits it out, then is cancelled.
# The handlers in hand go on meanwhile, so the grace is part of --drain-timeout-s, not added to it.
READ_GRACE_S = 0.1
CLOSE_MARGIN_S = 5.0  # closing the clients and the ledger (its last checkpoint), in drain_bound_s


@dataclass(frozen=True)
class Summary:
    """What a run did, returned by :meth:`~solutions.worker.Worker.run`."""

    counts: Snapshot
    left_pending: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


def settle_s(ledger_busy_timeout_ms: int) -> float:
    """How long a commit or XACK on its way gets at the drain: the ledger's busy timeout plus a margin."""
    return ledger_busy_timeout_ms / 1000 + SETTLE_MARGIN_S


def drain_bound_s(settings: Settings) -> float:
    """The longest :meth:`~solutions.worker.Worker.run` can take from the stop to its return, by its
    own timeouts: the runs in hand, a commit on its way, the PEL query and the lease, and a margin
    for closing."""
    return (READ_GRACE_S + CANCEL_TIMEOUT_S + settings.drain_timeout_s + settle_s(settings.ledger_busy_timeout_ms)
            + 2 * LEFT_QUERY_TIMEOUT_S + CLOSE_MARGIN_S)


async def drain(
    tasks: list[asyncio.Task[None]],
    parts: list[StreamPart],
    *,
    drain_timeout_s: float,
    settle_timeout_s: float,
    breaker: StoreBreaker | None,
    counts: Callable[[], Snapshot],
) -> Summary:
    """Stop ``tasks`` (the readers, rescuers and watchers), drain every part, log the line; the summary.

    ``counts`` is read once everything has settled, for the line and the summary.
    """
    started = time.monotonic()
    if tasks:
        await asyncio.wait(tasks, timeout=READ_GRACE_S)
    await cancel_and_wait(tasks, CANCEL_TIMEOUT_S)
    if breaker is not None:
        await breaker.aclose()
    budget_s = max(0.0, drain_timeout_s - (time.monotonic() - started))  # the grace counts
    in_hand = await asyncio.gather(*(part.pool.drain(budget_s) for part in parts))
    settled = await asyncio.gather(*(part.pipeline.settle(settle_timeout_s) for part in parts))
    if not all(settled):
        log.warning("a commit or XACK was still on its way after %ss; its messages stay pending", settle_timeout_s)
    lefts = await asyncio.gather(*(left_in_pel(part, held) for part, held in zip(parts, in_hand, strict=True)))
    named = len(parts) > 1  # a shard's ids are not unique across shards
    left = [f"{part.name}/{i}" if named else i for part, ids in zip(parts, lefts, strict=True) for i in ids]
    await asyncio.gather(*(release_lease(part) for part in parts))
    total = counts()
    elapsed_s = time.monotonic() - started
    log.info(
        "drain complete in %.2fs%s: processed=%s acked=%s errors=%s dead_lettered=%s reclaimed=%s "
        "dedupe_skipped=%s left_pending=%s%s",
        elapsed_s,
        f" over {len(parts)} streams" if named else "",
        total.processed,
        total.acked,
        total.errors,
        total.dead_lettered,
        total.reclaimed,
        total.dedupe_skipped,
        len(left),
        (" ids=" + ",".join(left)) if left else "",
    )
    return Summary(total, left, elapsed_s)


async def release_lease(part: StreamPart) -> None:
    """Give ``part``'s rescuer lease up, so that another worker's rescuer may start at once.

    At most :data:`LEFT_QUERY_TIMEOUT_S`: the lease expires by itself, and on a shard whose
    master is dead a release would wait out the client's retries (every shard's at once, and
    one after another before).
    """
    with contextlib.suppress(*REDIS_ERRORS):  # TimeoutError is an OSError
        await asyncio.wait_for(part.rescuer.release_lease(), LEFT_QUERY_TIMEOUT_S)


async def left_in_pel(part: StreamPart, held: list[str]) -> list[str]:
    """What this consumer leaves pending on ``part``'s stream, as Redis has it (``XPENDING``).

    More than the pool still held: an ``XREADGROUP`` in flight when the stop came was
    cancelled after Redis had delivered its batch, so those entries sit in our PEL though the
    worker never saw them. If Redis cannot say, what the pool held is the best answer.
    """
    try:
        return await asyncio.wait_for(own_pending(part.client, part.settings, LEFT_LISTED), LEFT_QUERY_TIMEOUT_S)
    except REDIS_ERRORS as exc:  # TimeoutError is an OSError
        log.warning("could not read what is left in the PEL of %s (%s); listing what the worker held",
                    part.name, describe(exc))
        return held
