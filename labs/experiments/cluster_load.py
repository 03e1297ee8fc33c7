"""A load on a sharded stream, and what the ledger says about it: per shard, per key, lost and charged twice.

:class:`ShardWriters` writes ``order.paid`` events at a steady rate to the shards of a stream on
Redis Cluster, each event to shard ``shard_of(order_id)``, with **one writer task per shard**: a
shard whose master is dead delays only its own events (in order), the others go on. Event ids
carry a counter in production order (``<prefix>-<n>``), so the ledger alone tells whether one
order's events were charged in order. The writers record each acknowledged ``XADD`` (the
independent record the checks compare the ledger with).

The rest reads a worker's ledger (``charges``, :mod:`solutions.ledger`): :func:`read_charges`,
:func:`key_order_violations` (an event of an order charged after a later event of that order),
:func:`global_inversions` (neighbouring charges in another order than they were produced: the
"no global order" of a sharded stream), :func:`longest_gaps` (each shard's longest pause
between two charges), and :func:`tally` (lost and duplicated against the writers' record).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from solutions.cluster_router import ClusterRouter
from solutions.ledger import read_rows
from solutions.shards import ShardSet, shard_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sent:
    """One acknowledged XADD."""

    event_id: str
    order_id: str
    shard: int
    msg_id: str
    t: float  # time.time() of the acknowledgement


@dataclass(frozen=True)
class Charged:
    """One row of the ledger's ``charges``, in the order it was written."""

    event_id: str
    order_id: str
    msg_id: str
    t: float  # charged_at


def master_layout(cluster: Any) -> list[list[tuple[int, int]]]:
    """Each master's slot ranges from a ``RedisCluster``'s ``CLUSTER SLOTS``, masters in slot order
    (what :func:`~solutions.shards.plan_tags` takes)."""
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for (lo, hi), info in sorted(cluster.cluster_slots().items()):
        host, port = info["primary"]
        ranges.setdefault((str(host), int(port)), []).append((int(lo), int(hi)))
    return sorted(ranges.values(), key=lambda r: r[0])


def seq_of(event_id: str) -> int:
    """The production counter in an event id ``<prefix>-<n>``."""
    return int(event_id.rsplit("-", 1)[1])


def event(order_id: str, event_id: str) -> dict[FieldT, EncodableT]:  # XADD's fields, as redis-py types them
    cents = random.randint(100, 99_999)
    return {"type": "order.paid", "order_id": order_id, "amount": f"{cents // 100}.{cents % 100:02d}",
            "event_id": event_id}


class ShardWriters:
    """Events at ``rate`` per second over ``orders`` order ids, one writer task per shard."""

    def __init__(self, router: ClusterRouter, shards: ShardSet, *, rate: float, orders: int = 60,
                 prefix: str = "ev") -> None:
        if rate <= 0 or orders < 1:
            raise ValueError("need rate > 0 and orders >= 1")
        self.router = router
        self.shards = shards
        self.rate = rate
        self.orders = orders
        self.prefix = prefix
        self.sent: list[Sent] = []
        self.failures = 0
        self._queues: list[asyncio.Queue[tuple[str, str] | None]] = []

    async def run(self, stop: asyncio.Event) -> list[Sent]:
        """Write until ``stop``; then each writer sends what it still holds (a dead shard's backlog too)."""
        self._queues = [asyncio.Queue() for _ in self.shards.names]
        writers = [asyncio.create_task(self._write(i)) for i in range(len(self.shards))]
        started, counter = time.monotonic(), itertools.count()
        while not stop.is_set():
            n = next(counter)
            order_id = f"order-{n % self.orders}"
            self._queues[shard_of(order_id, len(self.shards))].put_nowait((order_id, f"{self.prefix}-{n}"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, started + (n + 1) / self.rate - time.monotonic()))
        for queue in self._queues:
            queue.put_nowait(None)
        await asyncio.gather(*writers)
        return self.sent

    async def _write(self, index: int) -> None:
        name, queue = self.shards.names[index], self._queues[index]
        client = self.router.client(name)
        while (item := await queue.get()) is not None:
            order_id, event_id = item
            while True:  # the same event_id again after a failure: the worker's dedupe makes that safe
                try:
                    raw = await client.xadd(name, event(order_id, event_id))
                except RedisError as exc:
                    self.failures += 1
                    log.debug("XADD to %s failed, sending %s again: %r", name, event_id, exc)
                    await asyncio.sleep(0.05)
                    continue
                msg_id = raw.decode() if isinstance(raw, bytes) else str(raw)
                self.sent.append(Sent(event_id, order_id, index, msg_id, time.time()))
                break


async def fill(router: ClusterRouter, shards: ShardSet, per_shard: int, *, prefix: str = "ev") -> int:
    """Put ``per_shard`` events on every shard at once (one pipeline per shard); returns how many in all."""
    n = len(shards)
    total = 0
    for index, name in enumerate(shards.names):
        orders = [f"order-{k}" for k in range(64 * n) if shard_of(f"order-{k}", n) == index]
        async with router.client(name).pipeline(transaction=False) as pipe:
            for k in range(per_shard):
                pipe.xadd(name, event(orders[k % len(orders)], f"{prefix}-{index}-{k}"))
            total += len(await pipe.execute())
    return total


def read_charges(ledger: Path) -> list[Charged]:
    """Every row of ``charges`` in insertion order (none while the ledger has no table yet)."""
    rows = read_rows(ledger, "SELECT event_id, order_id, msg_id, charged_at FROM charges ORDER BY id")
    return [Charged(str(e), str(o), str(m), float(t)) for e, o, m, t in rows]


def charged_count(ledger: Path) -> int:
    """How many rows ``charges`` has (0 while there is no ledger yet): a cheap poll."""
    rows = read_rows(ledger, "SELECT COUNT(*) FROM charges")
    return int(rows[0][0]) if rows else 0


def key_order_violations(charges: Iterable[Charged]) -> int:
    """Charges of an order that come after a charge of a *later* event of the same order."""
    highest: dict[str, int] = {}
    violations = 0
    for charge in charges:
        seq = seq_of(charge.event_id)
        if seq < highest.get(charge.order_id, -1):
            violations += 1
        highest[charge.order_id] = max(seq, highest.get(charge.order_id, -1))
    return violations


def global_inversions(charges: Sequence[Charged]) -> int:
    """Neighbouring charges in the ledger whose events were produced the other way round."""
    return sum(1 for a, b in itertools.pairwise(charges) if seq_of(b.event_id) < seq_of(a.event_id))


def longest_gaps(
    charges: Iterable[Charged], n_shards: int, *, since: float, until: float | Sequence[float]
) -> list[float]:
    """Each shard's longest pause between two charges in ``[since, until]`` (the window's ends count as charges).

    ``until`` may be one time or one per shard: a shard whose writer stopped earlier (its last
    event was sent earlier) must not count the quiet after that as a pause.
    """
    ends = [until] * n_shards if isinstance(until, int | float) else list(until)
    times: list[list[float]] = [[since] for _ in range(n_shards)]
    for charge in charges:
        shard = shard_of(charge.order_id, n_shards)
        if since <= charge.t <= ends[shard]:
            times[shard].append(charge.t)
    return [max(b - a for a, b in itertools.pairwise([*ts, end])) for ts, end in zip(times, ends, strict=True)]


@dataclass(frozen=True)
class Tally:
    """The writers' record against the ledger (and the dead letters)."""

    confirmed: int  # distinct event ids acknowledged by a master
    charged_once: int
    lost: int  # acknowledged, never charged, not dead-lettered
    duplicated: int  # charged more than once
    lost_ids: tuple[str, ...] = ()


def tally(sent: Iterable[Sent], charges: Iterable[Charged], dead_lettered: Iterable[str] = ()) -> Tally:
    confirmed = {s.event_id for s in sent}
    counts = Counter(c.event_id for c in charges)
    lost = sorted(confirmed - set(counts) - set(dead_lettered))
    return Tally(
        confirmed=len(confirmed),
        charged_once=sum(1 for e in confirmed if counts.get(e) == 1),
        lost=len(lost),
        duplicated=sum(1 for n in counts.values() if n > 1),
        lost_ids=tuple(lost[:20]),
    )
