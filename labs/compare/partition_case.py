"""The same partition for all three brokers: the leader, with a producer on its side, cut off from the majority.

Each broker runs in network namespaces (:mod:`labs.launcher.partitioned`): Redis as three copies
under Sentinel (min-replicas-to-write 1), RabbitMQ's three nodes and NATS's three servers. Two
client namespaces join them:

- ``client-min``, on the leader's side of the cut: a producer that only knows the leader (Redis:
  the master and one sentinel);
- ``client-maj``, with the two other nodes (Redis: two replicas and two sentinels, a quorum): a
  second producer and the consumers, which charge into one SQLite ledger.

The plan (:class:`PartitionPlan`) is the same for every broker: both producers publish at the same
rate; ``before_s`` after the start the cut drops every packet between the two sides (silently, as
a dead switch port does); ``cut_s`` later it heals; the producers finish their events, the consumers
drain. Every figure comes from records the brokers do not keep: the producers' logs (what was
confirmed, when) and the ledger (what was charged, when):

- ``lost``: confirmed by a producer and never charged (acknowledged, then lost);
- ``minority_confirmed_in_cut`` and ``minority_accepting_s``: what the cut-off leader kept
  confirming, and until when (from the cut);
- ``first_charge_after_cut_s``: the gap before the first charge of an event first sent after the
  cut (the majority's failover, as its producer and consumers see it);
- ``timers``: the server settings that explain those figures, by name.

:func:`run_partition_rows` starts each broker in namespaces, runs the case and stops it; its rows
have the shape of :class:`labs.compare.scenarios.Row` (``case`` is ``"partition"``). It needs root
and nftables (:func:`labs.launcher.netns.unavailable_reason`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from labs import polling
from labs.compare.consumer import Charger, consume
from labs.compare.contract import Broker, Event, Settings
from labs.compare.producer import ProduceLog, make_events, produce
from labs.compare.registry import BrokerAddress, make_broker
from labs.compare.scenarios import Row
from labs.launcher import netns, redis_copies
from labs.launcher.partitioned import (
    CLIENT_MAJ,
    CLIENT_MIN,
    Address,
    NatsPartitioned,
    Partitioned,
    RabbitPartitioned,
    RedisPartitioned,
    in_hub,
)
from solutions.ledger import read_rows

log = logging.getLogger(__name__)
T = TypeVar("T")
KINDS = ("redis", "redis+WAIT", "redis+WAIT+always", "rabbitmq", "nats", "nats+always")


class PartitionRow(Row, total=False):
    """A :class:`~labs.compare.scenarios.Row` with the partition's own figures."""

    cut_at_s: float  # from the case's start
    heal_at_s: float
    cut_off: list[str]  # the members on the leader's side
    minority_confirmed_in_cut: int
    minority_accepting_s: float | None  # from the cut to the cut-off side's last confirm before the heal
    minority_unconfirmed_in_cut: int  # attempts of the cut-off producer that got no confirm (unknown, refused)
    first_charge_after_cut_s: float | None
    lost_cut_off_side: int  # of ``lost``, those the cut-off side's producer had confirmed
    lost_earliest_confirm_s: float | None  # the earliest confirm of a lost event, from the cut (< 0: before it)
    timers: str


@dataclass(frozen=True, kw_only=True)
class PartitionPlan:
    """The one schedule every broker gets: the cut and the heal at the same points."""

    rate_per_s: float = 10.0  # each producer
    before_s: float = 3.0  # publishing before the cut
    cut_s: float = 20.0  # the partition lasts this long, then heals
    after_s: float = 3.0  # publishing after the heal
    settle_s: float = 5.0  # drained: every confirmed event charged, or no new charge for this long
    drain_timeout_s: float = 90.0
    down_after_ms: int = 1000  # Redis's Sentinel (the lab's setting; Redis's default is 30 s)
    # RabbitMQ's Erlang distribution: the lab's setting, as Sentinel's 1 s is (its default is 60 s, None here;
    # RabbitMQ's docs advise against less than about 10 s). A quorum queue elects after the nodedown it gives.
    net_ticktime_s: int | None = 10

    @property
    def events(self) -> int:
        return int(self.rate_per_s * (self.before_s + self.cut_s + self.after_s))


def _broker(kind: str, address: Address, queue: str, settings: Settings) -> Broker:
    """The comparison's adapter for the row ``kind`` (:func:`labs.compare.registry.make_broker`); the
    launcher's address is its JSON (``sentinels`` or ``urls``, and how the cluster was set up)."""
    return make_broker(kind, cast(BrokerAddress, address), queue, settings)


async def _touch(kind: str, address: Address, queue: str, settings: Settings) -> None:
    """Connect an adapter once and close it: its queue (stream, group, durable consumer) exists after."""
    broker = _broker(kind, address, queue, settings)
    await broker.connect()
    await broker.close()


# -- one run ----------------------------------------------------------------------------------


@dataclass
class _Control:
    """What the main thread tells both sides: start publishing, or give up (a run that failed to start)."""

    go: threading.Event = field(default_factory=threading.Event)
    abort: threading.Event = field(default_factory=threading.Event)

    async def started(self) -> bool:
        """Wait for the start; False when the run was aborted instead."""
        await asyncio.to_thread(self.go.wait)
        return not self.abort.is_set()

    def give_up(self) -> None:
        self.abort.set()
        self.go.set()


@dataclass
class _Majority:
    """The majority side's consumers and producer, in a thread of their own; driven from the main thread."""

    control: _Control
    ready: threading.Event = field(default_factory=threading.Event)
    produced: threading.Event = field(default_factory=threading.Event)
    loop: asyncio.AbstractEventLoop | None = None
    stop: asyncio.Event | None = None
    log: ProduceLog | None = None

    def finish(self) -> None:
        if self.loop is not None and self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)


async def _majority(side: _Majority, make: Callable[[], Broker], chargers: list[Charger],
                    events: list[Event], plan: PartitionPlan) -> None:
    side.loop, side.stop = asyncio.get_running_loop(), asyncio.Event()
    consumers = [make() for _ in chargers]
    producer = make()
    try:
        for b in [*consumers, producer]:
            await b.connect()
        tasks = [asyncio.create_task(consume(b, c, side.stop)) for b, c in zip(consumers, chargers, strict=True)]
        side.ready.set()
        if await side.control.started():
            side.log = await _produce(producer, events, plan)
        side.produced.set()
        await side.stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        side.ready.set()
        side.produced.set()
        for b in [*consumers, producer]:
            with contextlib.suppress(Exception):
                await b.close()


async def _minority(make: Callable[[], Broker], events: list[Event], control: _Control,
                    ready: threading.Event, plan: PartitionPlan) -> ProduceLog:
    producer = make()
    try:
        await producer.connect()
        ready.set()
        return await _produce(producer, events, plan) if await control.started() else ProduceLog()
    finally:
        ready.set()
        with contextlib.suppress(Exception):
            await producer.close()


async def _produce(producer: Broker, events: list[Event], plan: PartitionPlan) -> ProduceLog:
    total_s = plan.before_s + plan.cut_s + plan.after_s
    return await produce(producer, events, rate_per_s=plan.rate_per_s, resend_deadline_s=plan.cut_s + 30.0,
                         deadline_s=total_s + 60.0)


def _in_namespace(pool: ThreadPoolExecutor, ns: str, factory: Callable[[], Coroutine[Any, Any, T]]) -> Future[T]:
    """``asyncio.run(factory())`` in a pool thread living in ``ns``: every socket of that loop is a client there."""

    def body() -> T:
        with netns.entered(ns):
            return asyncio.run(factory())

    return pool.submit(body)


def _wait_replicas(kind: str) -> int:
    return 1 if "WAIT" in kind else 0


def run_partition(site: Partitioned, kind: str, plan: PartitionPlan, settings: Settings,
                  work: Path) -> PartitionRow:
    """Run the partition case once on ``site`` for the row ``kind``; its row."""
    queue = f"partition-{uuid.uuid4().hex[:6]}"
    everyone = site.address([])
    in_hub(site.fabric, lambda: asyncio.run(_touch(kind, everyone, queue, settings)))  # the queue, made R3
    site.wait_queue(queue)
    leader = site.leader(queue)
    cut_side, majority = site.sides(leader)
    min_address, maj_address = site.address(cut_side), site.address(majority)
    ledger = work / f"{kind.replace('+', '-')}-{queue}.sqlite3"
    chargers = [Charger(ledger, f"{kind}-c{i}", max_attempts=settings.max_attempts) for i in range(settings.consumers)]
    n = plan.events
    maj_events, min_events = make_events(f"{queue}-maj", n), make_events(f"{queue}-min", n)
    control = _Control()
    side = _Majority(control)
    min_ready = threading.Event()
    fabric = site.fabric
    row: PartitionRow = {"broker": kind, "case": "partition", "durability": site.durability(_wait_replicas(kind)),
                         "timers": site.timers(), "cut_off": [*cut_side, CLIENT_MIN]}
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="partition") as pool:
        maj_done = _in_namespace(pool, fabric.ns_name(CLIENT_MAJ), lambda: _majority(
            side, lambda: _broker(kind, maj_address, queue, settings), chargers, maj_events, plan))
        min_done = _in_namespace(pool, fabric.ns_name(CLIENT_MIN), lambda: _minority(
            lambda: _broker(kind, min_address, queue, settings), min_events, control, min_ready, plan))
        try:
            for what, ready in (("the majority's consumers and producer", side.ready),
                                ("the cut-off producer", min_ready)):
                if not ready.wait(60.0):
                    raise TimeoutError(f"{kind}: {what} did not connect in 60 s")
            for done in (maj_done, min_done):
                if done.done():
                    done.result()  # a connect that failed: its error
            started = time.time()
            control.go.set()
            cut_at, heal_at = _cut_and_heal(fabric, [*cut_side, CLIENT_MIN], [*majority, CLIENT_MAJ], plan)
            min_log = min_done.result(timeout=plan.cut_s + plan.after_s + 180.0)
            if not side.produced.wait(plan.after_s + 180.0):
                log.warning("%s: the majority's producer did not finish", kind)
            _drain(ledger, [min_log, side.log], plan)
        finally:
            if not control.go.is_set():
                control.give_up()
            fabric.heal()
            side.finish()
            with contextlib.suppress(Exception):
                maj_done.result(timeout=60.0)
            for c in chargers:
                c.close()
    return row | _figures(ledger, min_log, side.log or ProduceLog(), started, cut_at, heal_at)


def _cut_and_heal(fabric: netns.Fabric, cut_side: list[str], majority: list[str],
                  plan: PartitionPlan) -> tuple[float, float]:
    """The schedule: the cut ``before_s`` from now, the heal ``cut_s`` after it; their unix times."""
    time.sleep(plan.before_s)  # a fault at a fixed point of the schedule, the same for every broker
    fabric.partition(cut_side, majority)
    cut_at = time.time()  # every member's rules are in place (nft in each namespace takes a few ms)
    time.sleep(max(0.0, cut_at + plan.cut_s - time.time()))
    heal_at = time.time()  # the rules go from here on
    fabric.heal()
    log.info("partition %s | %s: cut at %.1f, healed %.1f s later", cut_side, majority, cut_at, heal_at - cut_at)
    return cut_at, heal_at


def _charged(ledger: Path) -> set[str]:
    return {str(r[0]) for r in read_rows(ledger, "SELECT event_id FROM charges")} if ledger.exists() else set()


def _drain(ledger: Path, logs: list[ProduceLog | None], plan: PartitionPlan) -> None:
    """Wait until every confirmed event is charged, or nothing new was charged for ``settle_s`` (a loss)."""
    confirmed = {eid for plog in logs if plog for eid in plog.confirmed}
    seen = {"count": -1, "since": time.monotonic()}

    def drained() -> bool:
        charged = _charged(ledger)
        if confirmed <= charged:
            return True
        if len(charged) != seen["count"]:
            seen["count"], seen["since"] = len(charged), time.monotonic()
        return time.monotonic() - seen["since"] > plan.settle_s

    if not polling.poll(drained, plan.drain_timeout_s, poll_s=0.2):
        log.warning("partition: drain deadline (%.0f s) reached", plan.drain_timeout_s)


def _figures(ledger: Path, min_log: ProduceLog, maj_log: ProduceLog, started: float, cut_at: float,
             heal_at: float) -> PartitionRow:
    rows = read_rows(ledger, "SELECT event_id, charged_at FROM charges ORDER BY charged_at") if ledger.exists() \
        else []
    counts = Counter(str(r[0]) for r in rows)
    times = [float(r[1]) for r in rows]
    confirmed = {**maj_log.confirmed, **min_log.confirmed}
    lost = sorted(set(confirmed) - set(counts))
    attempts = [*min_log.attempts, *maj_log.attempts]
    first_sent: dict[str, float] = {}  # when each event's first attempt began (an attempt logs its end)
    for a in sorted(attempts, key=lambda a: a.at - a.took_s):
        first_sent.setdefault(a.event_id, a.at - a.took_s)
    after = [float(t) for eid, t in rows if first_sent.get(str(eid), 0.0) > cut_at]
    # what the cut-off side took: attempts begun after the cut and confirmed before the heal
    in_cut = [a.at for a in min_log.attempts if a.outcome == "confirmed" and a.at - a.took_s >= cut_at
              and a.at <= heal_at]
    gaps = [b - a for a, b in itertools.pairwise(times) if b > cut_at]
    return {
        "sent_attempts": len(attempts), "confirmed": len(confirmed),
        "unknown": sum(1 for a in attempts if a.outcome == "unknown"),
        "refused": sum(1 for a in attempts if a.outcome == "refused"),
        "gave_up": len(min_log.gave_up) + len(maj_log.gave_up),
        "charged": len(counts), "charged_twice": sum(1 for c in counts.values() if c > 1),
        "lost": len(lost), "lost_ids": lost[:10],
        "lost_cut_off_side": len(set(lost) & set(min_log.confirmed)),
        "lost_earliest_confirm_s": round(min(confirmed[e] for e in lost) - cut_at, 2) if lost else None,
        "cut_at_s": round(cut_at - started, 3), "heal_at_s": round(heal_at - started, 3),
        "minority_confirmed_in_cut": len(in_cut),
        "minority_accepting_s": round(max(in_cut) - cut_at, 2) if in_cut else None,
        "minority_unconfirmed_in_cut": sum(1 for a in min_log.attempts
                                           if cut_at <= a.at - a.took_s and a.at <= heal_at
                                           and a.outcome != "confirmed"),
        "first_charge_after_cut_s": round(min(after) - cut_at, 2) if after else None,
        "longest_gap_s": round(max(gaps), 2) if gaps else None,
        "charge_times_s": [round(t - started, 3) for t in times],
        "elapsed_s": round(time.time() - started, 2),
    }


# -- every broker ---------------------------------------------------------------------------------


def site_key(kind: str) -> str:
    """Rows that share a cluster: ``redis`` and ``redis+WAIT`` (everysec), ``...+always`` rows their own."""
    base = "redis" if kind.startswith("redis") else kind.split("+", 1)[0]
    return f"{base}-always" if kind.endswith("+always") else base


def start_site(kind: str, run_dir: Path, plan: PartitionPlan) -> Partitioned:
    """The cluster of the row ``kind`` in namespaces, started (``+always``: fsync every write)."""
    always = kind.endswith("+always")
    if kind.startswith("redis"):
        return RedisPartitioned.start(run_dir, redis_copies.Copies(down_after_ms=plan.down_after_ms,
                                                                    fsync="always" if always else "everysec"))
    if kind.startswith("rabbitmq"):
        return RabbitPartitioned.start(run_dir, plan.net_ticktime_s)
    if kind.startswith("nats"):
        return NatsPartitioned.start(run_dir, always)
    raise ValueError(f"no partition site for {kind!r}; choose one of {', '.join(KINDS)}")


def unavailable_reason() -> str | None:
    """Why the partition case cannot run here (one line: root, iproute2, nftables), None when it can."""
    return netns.unavailable_reason()


def run_partition_rows(kinds: tuple[str, ...], settings: Settings, work: Path,
                       plan: PartitionPlan | None = None) -> list[PartitionRow]:
    """The partition row of each of ``kinds``, each broker started in namespaces, run and stopped.

    A broker whose run fails gives a row with ``error`` (the others still run). Rows in ``kinds`` order.
    """
    plan = plan or PartitionPlan()
    by_site: dict[str, list[str]] = {}
    for kind in kinds:
        by_site.setdefault(site_key(kind), []).append(kind)
    rows: dict[str, PartitionRow] = {}
    for key, site_kinds in by_site.items():
        site: Partitioned | None = None
        try:
            site = start_site(site_kinds[0], work / f"netns-{key}", plan)
            for kind in site_kinds:
                rows[kind] = _row_or_error(kind, functools.partial(run_partition, site, kind, plan, settings, work))
        except Exception as exc:
            log.exception("%s: the cluster in namespaces did not start", key)
            for kind in site_kinds:
                rows.setdefault(kind, {"broker": kind, "case": "partition", "error": f"{type(exc).__name__}: {exc}"})
        finally:
            if site is not None:
                site.stop()
    return [rows[kind] for kind in kinds]


def _row_or_error(kind: str, run: Callable[[], PartitionRow]) -> PartitionRow:
    try:
        return run()
    except Exception as exc:
        log.exception("%s: partition case failed", kind)
        return {"broker": kind, "case": "partition", "error": f"{type(exc).__name__}: {exc}"}
