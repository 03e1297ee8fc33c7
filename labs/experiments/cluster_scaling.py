"""The sharded worker against the number of shards: throughput, and what changing N does to per-key order.

- :func:`throughput`: N shards filled with events, one worker with a 5 ms handler and a fixed
  number of handler slots per shard; charges per second from the ledger's first to last charge,
  and how busy the worker's event loop was (:attr:`ThroughputPoint.loop_busy`): more shards add
  charges per second only while the loop waits for the handlers, not once it needs a CPU all the
  time (a loaded machine, or another process holding a core).
- :func:`resplit`: what changing the number of shards does to one order: its next event goes
  to another shard, which is handled before the old shard's backlog.

Both run :class:`~solutions.worker.Worker` on a :class:`~solutions.cluster_site.ClusterSite` in this process (see
:mod:`labs.experiments.cluster_worker`) and read the ledger.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labs.experiments.cluster_load import charged_count, event, fill, key_order_violations, read_charges
from labs.experiments.cluster_worker import GROUP, running, startup_nodes, wait_charged, worker_settings
from labs.launcher.cluster import ClusterTopology
from labs.polling import poll_async
from solutions.cluster_router import ClusterRouter
from solutions.shards import ShardSet, ensure_shards, registry_key, shard_of

# -- throughput ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThroughputPoint:
    shards: int
    events: int
    elapsed_s: float  # first charge to last charge
    # the share of the run the worker's event loop was on a CPU or waiting for one (/proc schedstat of its
    # thread): near 1, the loop never waited for the handlers and the CPU set the pace; None off Linux
    loop_busy: float | None = None

    @property
    def rate(self) -> float:
        return (self.events - 1) / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _thread_demand_s() -> float | None:
    """This thread's time on a CPU plus its time runnable, waiting for one, in s (``/proc/thread-self/schedstat``)."""
    try:
        on_cpu_ns, waiting_ns, _ = Path("/proc/thread-self/schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return (int(on_cpu_ns) + int(waiting_ns)) / 1e9


async def throughput(
    topology: ClusterTopology, *, stream: str, ledger_dir: Path, shard_counts: Sequence[int] = (1, 2, 3, 6),
    per_shard: int = 600, handler_delay_ms: int = 5, parallelism: int = 4, count: int | None = None,
) -> list[ThroughputPoint]:
    """For each N: fill N shards with ``per_shard`` events, run the worker until all are charged."""
    startup = startup_nodes(topology)
    points = []
    async with await ClusterRouter.connect(startup) as router:
        for n in shard_counts:
            name = f"{stream}{n}"
            shards = await ensure_shards(router, name, n)
            events = await fill(router, shards, per_shard)
            ledger = ledger_dir / f"throughput-{n}.sqlite3"
            settings = worker_settings(startup, name, n, ledger, handler_delay_ms=handler_delay_ms,
                                       parallelism=parallelism, count=count or 2 * parallelism)
            demand_before, wall_before = _thread_demand_s(), time.monotonic()
            async with running(settings):
                await poll_async(functools.partial(_charged_all, ledger, events), 60, 0.05, in_thread=False)
            demand_after, wall_s = _thread_demand_s(), time.monotonic() - wall_before
            busy = None if demand_before is None or demand_after is None else (demand_after - demand_before) / wall_s
            charges = read_charges(ledger)
            points.append(ThroughputPoint(n, len(charges), charges[-1].t - charges[0].t, busy))
            await delete_shards(router, shards)
    return points


def _charged_all(ledger: Path, events: int) -> bool:
    return charged_count(ledger) >= events


async def delete_shards(router: ClusterRouter, shards: ShardSet) -> None:
    for name in shards.names:
        await router.client(name).delete(name, f"{name}:dlq", f"{name}:{GROUP}:rescuer")
    registry = registry_key(shards.stream)
    await router.client(registry).delete(registry)


# -- changing the number of shards ---------------------------------------------------------


@dataclass(frozen=True)
class Resplit:
    """One order's two events around a change from ``n`` to ``n + 1`` shards, and how many orders move."""

    order_id: str
    old_shard: str  # where shard_of(order_id, n) put its first event, behind a backlog
    new_shard: str  # where shard_of(order_id, n + 1) puts its second one
    charged: tuple[str, ...]  # the order's event ids in the order they were charged
    violations: int
    moved_share: float  # of 1000 order ids, the share whose shard changes from n to n + 1


def moved_share(n: int, orders: int = 1000) -> float:
    """The share of ``orders`` order ids whose shard changes when ``n`` shards become ``n + 1``."""
    ids = [f"order-{i}" for i in range(orders)]
    return sum(shard_of(o, n) != shard_of(o, n + 1) for o in ids) / orders


async def resplit(topology: ClusterTopology, *, stream: str, ledger: Path, n: int = 3, backlog: int = 400) -> Resplit:
    """Event 1 of an order waits behind ``backlog`` events in its shard under ``n`` shards; event 2 goes
    where ``n + 1`` shards route it; one worker reads every shard. Tags do not depend on N
    (:func:`~solutions.shards.plan_tags`), so the first ``n`` of ``n + 1`` shards are the old set."""
    startup = startup_nodes(topology)
    async with await ClusterRouter.connect(startup) as router:
        shards = await ensure_shards(router, stream, n + 1)
        order_id = next(o for i in range(1000) if shard_of(o := f"order-x{i}", n) != shard_of(o, n + 1))
        old, new = shards.names[shard_of(order_id, n)], shards.names[shard_of(order_id, n + 1)]
        async with router.client(old).pipeline(transaction=False) as pipe:
            for k in range(backlog):
                pipe.xadd(old, event(f"order-b{k}", f"b-{k}"))
            pipe.xadd(old, event(order_id, "x-1"))
            await pipe.execute()
        await router.client(new).xadd(new, event(order_id, "x-2"))
        settings = worker_settings(startup, stream, n + 1, ledger, parallelism=4)
        async with running(settings):
            charges = await wait_charged(ledger, {"x-1", "x-2"}, 30)
        await delete_shards(router, shards)
    mine = [c for c in charges if c.order_id == order_id]
    return Resplit(order_id, old, new, tuple(c.event_id for c in mine), key_order_violations(mine), moved_share(n))
