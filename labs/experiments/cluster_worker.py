"""The sharded worker on a real cluster under load: a master's death, a live reshard, per-key order.

Each scenario runs :class:`~solutions.worker.Worker` on a :class:`~solutions.cluster_site.ClusterSite`
as asyncio tasks in this process
(as notebook 09 does) with a SQLite ledger, and judges it from records the worker does not
write: the writers' acknowledged XADDs (:mod:`labs.experiments.cluster_load`), the ledger, and
XPENDING read from the cluster.

- :func:`fault_under_load`: writers at a steady rate, the worker, then ``kill -9`` (or ``CLUSTER
  FAILOVER``) of the master that serves shard 0; each shard's longest pause in charging, lost
  and duplicated events, per-key order, XPENDING at the end.
- :func:`reshard_under_load`: the same load while shard 0's slot moves to another master
  (``CLUSTER SETSLOT`` + ``MIGRATE``, :mod:`labs.launcher.reshard`); a pending entry of a
  crashed consumer travels with the stream and is rescued on the new master.
- :func:`steady_load`: the same load with no fault: per-key order holds, the global order does not.

Throughput against the number of shards, and a change of N: :mod:`labs.experiments.cluster_scaling`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from labs.experiments import scenario_settings
from labs.experiments.cluster_faults import clusterdown_replies, set_full_coverage
from labs.experiments.cluster_load import (
    Charged,
    ShardWriters,
    Tally,
    global_inversions,
    key_order_violations,
    longest_gaps,
    read_charges,
    tally,
)
from labs.launcher.cluster import ClusterTopology
from labs.launcher.reshard import move_slot
from labs.polling import poll_async, poll_value_async, wait_until_async
from solutions.cluster_router import ClusterRouter, ShardClient
from solutions.cluster_site import ClusterSite
from solutions.drain import drain_bound_s
from solutions.settings import Address, Settings
from solutions.shards import ShardSet, ensure_shards, shard_of, slot_of
from solutions.worker import Worker

GROUP = "billing"
DRAIN_TIMEOUT_S = 30.0
RESHARD_MIN_IDLE_MS = 4000  # the reshard's rescuer waits past the move (see reshard_under_load)
WRITE_TIMEOUT_S = 30.0  # how long a scenario waits for its writers' minimum
Mark = Callable[[str], None]  # called with a label when the fault starts (a live chart draws a line)


def worker_settings(startup: Sequence[Address], stream: str, shards: int, ledger: Path, **overrides: Any) -> Settings:
    """The scenarios' worker: the experiments' base on the cluster, 5 ms handler, rescuer after 1.5 s idle.

    A scenario changes fields with ``dataclasses.replace`` on the result; ``overrides`` is the
    older way, kept for tests/test_cluster_worker.py and tests/test_shard_worker.py (deprecated).
    """
    settings = replace(
        scenario_settings.base(stream, ledger, cluster=startup), shards=shards, consumer="w1", handler_delay_ms=5,
        block_ms=500, min_idle_ms=1500, claim_interval_ms=250, drain_timeout_s=10.0, dedupe="sqlite",
        ledger_busy_timeout_ms=5000,  # nothing else writes the scenario's ledger; bounds the drain's wait
    )
    return replace(settings, **overrides) if overrides else settings


def startup_nodes(topology: ClusterTopology) -> list[Address]:
    return [("127.0.0.1", port) for port in topology.addresses().ports]


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Worker]:
    """A sharded worker as a task for the duration of the block, then drained."""
    worker = Worker(settings, site=ClusterSite(settings))
    task = asyncio.create_task(worker.run())
    await poll_async(lambda: worker.started.is_set() or task.done(), 15, 0.01, in_thread=False)
    if task.done():
        task.result()  # raises what stopped it
    try:
        yield worker
    finally:
        worker.request_stop()
        bound_s = drain_bound_s(settings)
        done, _ = await asyncio.wait({task}, timeout=bound_s)
        if not done:
            waits = tasks_waiting_at(str(Path(__file__).resolve().parents[2]))
            task.cancel()
            raise AssertionError(f"the worker did not return within {bound_s:g} s of the stop, its drain's own "
                                 f"bound; its tasks were waiting at:\n{waits}")
        task.result()


def tasks_waiting_at(prefix: str = "") -> str:
    """One line per task of this loop but the caller whose coroutine is defined under ``prefix``: its name and
    the chain of awaits it is suspended in (``Task.get_stack`` gives only the outermost frame)."""
    lines = []
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        if task is asyncio.current_task() or not getattr(coro, "cr_code", None) or \
                not coro.cr_code.co_filename.startswith(prefix):
            continue
        chain = []
        while coro is not None and getattr(coro, "cr_frame", None) is not None:
            frame = coro.cr_frame
            chain.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}")
            coro = coro.cr_await
        lines.append(f"  {task.get_name()}: {' > '.join(chain)}")
    return "\n".join(sorted(lines))


async def wait_charged(ledger: Path, event_ids: set[str], timeout_s: float) -> list[Charged]:
    """Poll the ledger until every event id in ``event_ids`` is charged (or the deadline); its rows."""
    async def read() -> list[Charged]:
        return read_charges(ledger)

    return await poll_value_async(read, lambda charges: event_ids <= {c.event_id for c in charges}, timeout_s)


async def pending_counts(router: ClusterRouter, shards: ShardSet) -> list[int]:
    """XPENDING's count on every shard."""
    return [int((await router.client(n).xpending(n, GROUP))["pending"]) for n in shards.names]


# -- a master's death, or a reshard, under load ------------------------------------------------


@dataclass(frozen=True)
class FaultRun:
    """What a fault under load did to each shard, judged from the writers' record and the ledger."""

    kind: str  # kill -9, CLUSTER FAILOVER or reshard
    shards: tuple[str, ...]
    hit: int  # the index of the shard whose master died or whose slot moved
    old_master: int
    new_master: int
    fault_s: float  # from the fault until every node agreed on the new owner
    gaps_s: tuple[float, ...]  # each shard's longest pause in charging, from just before the fault
    tally: Tally
    violations: int  # per-key order
    pending_end: tuple[int, ...]
    detail: dict[str, Any] = field(default_factory=dict)
    # CLUSTERDOWN replies each shard's master sent over the fault, from its own INFO errorstats (None: the
    # hit shard's, killed); empty when the run did not count them
    clusterdown_replies: tuple[int | None, ...] = ()

    @property
    def others_gap_s(self) -> float:
        """The other shards' longest pause in charging: a figure to show, not a proof (a loaded machine
        pauses the whole process, every shard alike); :attr:`others_refused` is the mechanism."""
        return max((g for i, g in enumerate(self.gaps_s) if i != self.hit), default=0.0)

    @property
    def others_refused(self) -> int:
        """CLUSTERDOWN replies the healthy shards' masters sent over the fault (counted on the servers)."""
        return sum(n for i, n in enumerate(self.clusterdown_replies) if i != self.hit and n is not None)


async def fault_under_load(
    topology: ClusterTopology, *, stream: str, ledger: Path, shards: int = 3, rate: float = 300.0,
    before_s: float = 1.5, after_s: float = 1.5, hard: bool = True, mark: Mark | None = None,
    full_coverage: bool = False,
) -> FaultRun:
    """Writers and the worker, then the master of shard 0 dies (``hard``) or hands over (``CLUSTER FAILOVER``).

    ``full_coverage`` sets ``cluster-require-full-coverage yes`` on every node for the run (the
    Redis default; the lab topology runs with ``no``) and sets it back to ``no`` afterwards.
    """

    async def fault(router: ClusterRouter, shard_set: ShardSet) -> tuple[int, int, float, dict[str, Any]]:
        masters = [_owner_port(router, name) for name in shard_set.names]
        port = masters[0]
        before = [await asyncio.to_thread(clusterdown_replies, topology, p) for p in masters]
        if mark is not None:
            mark("kill -9" if hard else "CLUSTER FAILOVER")
        result = await asyncio.to_thread(topology.failover, hard=hard, master_port=port, restart_old=True)
        # the healthy masters refuse every key while the cluster is 'fail' (full coverage 'yes') and none with 'no'
        refused = [None if p == port else await asyncio.to_thread(clusterdown_replies, topology, p) - before[i]
                   for i, p in enumerate(masters)]
        return result.old_master[1], result.new_master[1], result.elapsed_s, {"ready_s": result.ready_s,
                                                                              "clusterdown_replies": tuple(refused)}

    set_full_coverage(topology, full_coverage)
    try:
        run = await _under_load(topology, stream=stream, ledger=ledger, shards=shards, rate=rate,
                                before_s=before_s, after_s=after_s, fault=fault)
    finally:
        set_full_coverage(topology, False)
    detail = {**run.detail, "full_coverage": full_coverage}
    refused = detail.pop("clusterdown_replies", ())  # fault() hands it over in the detail; a field of its own
    return replace(run, kind="kill -9" if hard else "CLUSTER FAILOVER", detail=detail, clusterdown_replies=refused)


async def reshard_under_load(
    topology: ClusterTopology, *, stream: str, ledger: Path, shards: int = 3, rate: float = 200.0,
    before_s: float = 1.0, after_s: float = 2.5, mark: Mark | None = None,
) -> FaultRun:
    """Writers and the worker while shard 0's slot moves to the next master, with a crashed consumer's entry."""

    async def fault(router: ClusterRouter, shard_set: ShardSet) -> tuple[int, int, float, dict[str, Any]]:
        name = shard_set.names[0]
        client = router.client(name)
        async with client.pipeline(transaction=True) as pipe:  # MULTI: the worker's blocked read cannot take it first
            pipe.xadd(name, {"type": "order.paid", "order_id": "order-stuck", "amount": "1.00", "event_id": "stuck-0"})
            pipe.xreadgroup(GROUP, "crashed", {name: ">"}, count=1_000)  # takes what is new, and never acks
            stuck, _ = await pipe.execute()
        before = await _pel_row(client, name, stuck)
        source = _owner_port(router, name)
        masters = sorted(port for (_, port) in router.masters())
        target = masters[(masters.index(source) + 1) % len(masters)]
        if mark is not None:
            mark("reshard")
        started = time.monotonic()
        await asyncio.to_thread(move_slot, topology, slot_of(name), target)
        elapsed_s = time.monotonic() - started
        after = await _pel_row(client, name, stuck)
        detail = {"stuck_id": _text(stuck), "pel_before": before, "pel_after": after, "extra_events": ("stuck-0",)}
        return source, target, elapsed_s, detail

    # The crashed consumer's entry must still be its own when the move is over: a rescuer after 1.5 s idle took
    # it first once, on a loaded machine where the move took that long. 4 s: it is rescued after the move.
    run = await _under_load(topology, stream=stream, ledger=ledger, shards=shards, rate=rate, before_s=before_s,
                            after_s=after_s, fault=fault, tune=lambda s: replace(s, min_idle_ms=RESHARD_MIN_IDLE_MS))
    return replace(run, kind="reshard")


Fault = Callable[[ClusterRouter, ShardSet], Any]


async def _under_load(
    topology: ClusterTopology, *, stream: str, ledger: Path, shards: int, rate: float, before_s: float,
    after_s: float, fault: Fault | None, min_sent: int = 0, tune: Callable[[Settings], Settings] = lambda s: s,
) -> FaultRun:
    """The writers and the worker (:func:`worker_settings`, changed by ``tune``) around ``fault``."""
    startup = startup_nodes(topology)
    async with await ClusterRouter.connect(startup) as router:
        shard_set = await ensure_shards(router, stream, shards)
        writers, stop = ShardWriters(router, shard_set, rate=rate), asyncio.Event()
        async with running(tune(worker_settings(startup, stream, shards, ledger))):
            writing = asyncio.create_task(writers.run(stop))
            await asyncio.sleep(before_s)
            if min_sent:  # the writers share this loop with the worker: a starved machine sends fewer in before_s
                await wait_until_async(lambda: len(writers.sent) >= min_sent, WRITE_TIMEOUT_S,
                                       f"{min_sent} events sent")
            fault_at = time.time()
            old, new, fault_s, detail = await fault(router, shard_set) if fault else (0, 0, 0.0, {})
            await asyncio.sleep(after_s)
            stop.set()
            sent = await writing
            confirmed = {s.event_id for s in sent} | set(detail.get("extra_events", ()))
            charges = await wait_charged(ledger, confirmed, DRAIN_TIMEOUT_S)
            await _wait_pending_zero(router, shard_set, DRAIN_TIMEOUT_S)
        pending = await pending_counts(router, shard_set)
    last_sent = [max((x.t for x in sent if x.shard == i), default=fault_at) for i in range(shards)]
    gaps = longest_gaps(charges, shards, since=fault_at - 0.2, until=last_sent)
    return FaultRun(
        kind="", shards=shard_set.names, hit=0, old_master=old, new_master=new, fault_s=fault_s,
        gaps_s=tuple(gaps), tally=tally(sent, charges), violations=key_order_violations(charges),
        pending_end=tuple(pending),
        detail={**detail, "sent": len(sent), "writer_failures": writers.failures,
                "global_inversions": global_inversions(charges), "charged_per_shard": _per_shard(charges, shards)},
    )


async def steady_load(
    topology: ClusterTopology, *, stream: str, ledger: Path, shards: int = 3, rate: float = 400.0,
    seconds: float = 2.0, parallelism: int = 8, handler_jitter_ms: int = 5, min_sent: int = 0,
) -> FaultRun:
    """Writers and the worker with no fault: per-key order and the global order of the charges.

    ``min_sent``: go on past ``seconds`` until that many events were sent (a loaded machine sent 57 of 600).
    """
    run = await _under_load(topology, stream=stream, ledger=ledger, shards=shards, rate=rate, before_s=seconds,
                            after_s=0.0, fault=None, min_sent=min_sent,
                            tune=lambda s: replace(s, parallelism=parallelism, handler_jitter_ms=handler_jitter_ms))
    return replace(run, kind="none")


def _per_shard(charges: Sequence[Charged], shards: int) -> tuple[int, ...]:
    counts = [0] * shards
    for charge in charges:
        counts[shard_of(charge.order_id, shards)] += 1
    return tuple(counts)


async def _wait_pending_zero(router: ClusterRouter, shards: ShardSet, timeout_s: float) -> None:
    await poll_value_async(lambda: pending_counts(router, shards), lambda counts: sum(counts) == 0, timeout_s, 0.1)


class PelRow(TypedDict, total=False):
    """An entry's line of the extended ``XPENDING``: who holds it, how often delivered (empty: not pending)."""

    consumer: str
    deliveries: int


async def _pel_row(client: ShardClient, name: str, msg_id: str | bytes) -> PelRow:
    rows = await client.xpending_range(name, GROUP, min=msg_id, max=msg_id, count=1)
    if not rows:
        return PelRow()  # not pending
    row = rows[0]
    return PelRow(consumer=_text(row["consumer"]), deliveries=int(row["times_delivered"]))


def _owner_port(router: ClusterRouter, key: str) -> int:
    addr = router.owner(key)
    if addr is None:
        raise RuntimeError(f"no master known for {key}")
    return addr[1]


def _text(raw: str | bytes | int) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)

