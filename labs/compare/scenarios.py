"""The faults and workloads, the same for every broker: one :class:`Case` run on one :class:`Site`.

Every figure comes from a record the consumers under test do not keep for themselves: the
producer's log (what was confirmed), the SQLite ledger (what was charged, and how often), the
broker's dead letters, and /proc (RSS). A case waits, with a deadline, until every confirmed event
is charged or dead-lettered.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from labs.compare import client_profile, cpu
from labs.compare.client_profile import ProfileLine
from labs.compare.consumer import Charger, Tally, consume
from labs.compare.contract import Broker, Event, Settings
from labs.compare.cpu import CpuFigures
from labs.compare.producer import ProduceLog, make_events, produce, produce_windowed
from labs.compare.sites import Site
from labs.polling import poll_async, poll_value_async
from solutions.ledger import read_rows

log = logging.getLogger(__name__)
CRASH_AFTER_CHARGES = 3


class Row(TypedDict, total=False):
    """One broker's figures for one case (``broker`` and ``case`` always; ``error`` alone when the run failed).

    Total=False so that the parts of a row (:func:`_figures`, :func:`_after_fault`) are rows too.
    """

    broker: str
    case: str
    error: str
    durability: str
    server: str
    copies: int
    fsync: str
    confirm: str
    durability_ru: dict[str, str]  # fsync, confirm, dead_letters in Russian (notebook 11)
    window: int
    prefetch: int
    offered_per_s: float | None
    broker_dead_letters: bool  # the broker moves a poison message itself (the consumer only requeues)
    dead_lettered_by: str | None  # the poison case: "broker" (RabbitMQ's x-delivery-limit) or "consumer"
    memory_points: list[tuple[int, float]]  # (messages held, RSS MB of the broker's servers)
    bytes_per_message: float | None
    bytes_per_message_per_copy: float | None
    publish_p50_ms: float | None
    publish_p99_ms: float | None
    backlog_held: int
    rss_before_mb: float
    killed_port: int
    crash_redelivered_after_s: float | None
    out_of_order: int
    sent_attempts: int
    confirmed: int
    unknown: int
    refused: int
    gave_up: int
    charged: int
    charged_twice: int
    duplicates_absorbed: int
    dead_lettered: int
    lost: int
    lost_ids: list[str]
    publish_per_s: float | None
    charges_per_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    poison_attempts: int | None
    poison_dead_lettered: bool
    elapsed_s: float
    first_charge_after_kill_s: float | None
    longest_gap_s: float | None
    charge_times_s: list[float]  # each charge, in s from the case's start (the ledger's charged_at)
    kill_at_s: float  # the leader's kill, in s from the case's start
    latencies_ms: list[float]  # produce -> charge of each first charge (the consumers' tally)
    cpu: CpuFigures  # a held windowed publish: the client's, the broker's and the machine's CPU over it
    profile_top: list[ProfileLine]  # a profiled publish: the client's functions by own time
    profile_text: str  # the same as pstats prints it (make compare writes it beside the report)


@dataclass(frozen=True)
class Case:
    name: str
    events: int
    rate_per_s: float = 0.0  # 0: as fast as confirms come back; > 0: offered at this rate
    consumers: int = 2
    kill_leader_at_s: float = 0.0  # > 0: kill -9 of the queue's leader this long after the start
    orders: int = 0  # > 0: events cycle over this many order ids (per-key order)
    poison: bool = False  # one event whose handling always fails
    crash_consumer: bool = False  # a consumer process that kills itself between a charge and its ack
    hold: bool = False  # publish everything before any consumer starts (publish rate alone, then the drain)
    window: int = 0  # 0: one event in flight (produce); >= 1: produce_windowed with this window
    prefetch: int = 0  # > 0: this prefetch instead of the settings' (the prefetch sweep)
    memory_at: tuple[int, ...] = ()  # the memory case: RSS with this many messages held, each size in turn
    drain_timeout_s: float = 60.0
    produce_deadline_s: float = 120.0  # the producer stops re-sending after this (the rest: gave up)
    restart_killed: bool = True  # start the killed leader again once the case is over (every broker alike)
    profile: bool = False  # the held publish under cProfile (a run of its own: the profiler slows the client)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def _publish(producer: Broker, events: list[Event], case: Case) -> ProduceLog:
    if case.window:
        return await produce_windowed(producer, events, window=case.window, rate_per_s=case.rate_per_s,
                                      deadline_s=case.produce_deadline_s)
    return await produce(producer, events, rate_per_s=case.rate_per_s, deadline_s=case.produce_deadline_s)


async def _measured_publish(site: Site, producer: Broker, events: list[Event], case: Case) -> tuple[ProduceLog, Row]:
    """The held publish with the CPU the client, the row's broker processes and the machine spent on it
    (:mod:`labs.compare.cpu`), under cProfile when ``case.profile``."""
    pids = await asyncio.to_thread(site.pids)
    before = cpu.snapshot(pids)
    if case.profile:
        plog, profiler = await client_profile.profiled(_publish(producer, events, case))
    else:
        plog = await _publish(producer, events, case)
    measured: Row = {"cpu": cpu.figures(before, cpu.snapshot(pids), len(plog.confirmed))}
    if case.profile:
        measured["profile_top"], measured["profile_text"] = client_profile.top(profiler)
    return plog, measured


async def _publish_first(site: Site, producer: Broker, events: list[Event], case: Case) -> tuple[ProduceLog, Row]:
    """Everything published before any consumer starts; a windowed one is a throughput run, its CPU measured."""
    if case.hold and case.window:
        plog, measured = await _measured_publish(site, producer, events, case)
    else:
        plog, measured = await _publish(producer, events, case), {}
    measured["backlog_held"] = await producer.backlog()
    return plog, measured


async def run_case(site: Site, case: Case, settings: Settings, work: Path) -> Row:
    """Run ``case`` on ``site`` once; the row of figures."""
    settings = replace(settings, prefetch=case.prefetch or settings.prefetch, consumers=case.consumers)
    queue = f"{case.name}-{uuid.uuid4().hex[:6]}"
    ledger = work / f"{site.kind.replace('+', '-')}-{queue}.sqlite3"
    events = make_events(queue, case.events, orders=case.orders, poison_at=case.events // 2 if case.poison else -1)
    poison_ids = {e.event_id for e in events if e.amount == "poison"}
    producer = site.broker(queue, settings)
    await producer.connect()
    if case.memory_at:
        try:
            return await _memory(site, producer, queue, case, events)
        finally:
            await producer.close()
    brokers = [site.broker(queue, settings) for _ in range(case.consumers)]
    chargers = [Charger(ledger, f"{site.kind}-c{i}", max_attempts=settings.max_attempts,
                        broker_dead_letters=producer.broker_dead_letters) for i in range(case.consumers)]
    stop = asyncio.Event()
    durability = await producer.durability()
    row: Row = {"broker": site.kind, "case": case.name, "durability": durability.text(), "server": durability.server,
                "copies": durability.copies, "fsync": durability.fsync, "confirm": durability.confirm,
                "durability_ru": durability.ru, "window": case.window or 1, "prefetch": settings.prefetch,
                "offered_per_s": case.rate_per_s or None,
                "broker_dead_letters": producer.broker_dead_letters}
    plog: ProduceLog | None = None
    if case.hold or case.crash_consumer:  # everything published first (the crash case: then the crasher alone)
        plog, measured = await _publish_first(site, producer, events, case)
        row |= measured
    crash_at = 0.0
    if case.crash_consumer:  # it charges, dies unacked
        crash_at = await _crash_time(_spawn_crasher(site, queue, ledger, settings))
    for b in brokers:
        await b.connect()
    tasks = [asyncio.create_task(consume(b, c, stop)) for b, c in zip(brokers, chargers, strict=True)]
    fault: asyncio.Task[tuple[float, int]] | None = None
    if case.kill_leader_at_s:
        fault = asyncio.create_task(_kill_leader_later(site, queue, case.kill_leader_at_s))
    started = time.time()
    if plog is None:
        plog = await _publish(producer, events, case)
    killed_at, killed_port = await fault if fault else (0.0, 0)
    dead = await _drain(ledger, plog, poison_ids, chargers, case, crash_at, producer)
    stop.set()
    tallies: list[Tally] = list(await asyncio.gather(*tasks))
    if not poison_ids or not dead:
        dead = await _retry(producer.dead_letters)
    for b in [producer, *brokers]:
        await b.close()
    for c in chargers:
        c.close()
    row |= _figures(ledger, plog, tallies, dead, poison_ids, started)
    if killed_port:
        row |= _after_fault(ledger, plog, killed_at)
        row["killed_port"] = killed_port
        row["kill_at_s"] = round(killed_at - started, 3)
        if case.restart_killed:  # after the case, for every broker alike: no restart inside the figures
            await asyncio.to_thread(site.restart, killed_port, queue)
    return row | _details(ledger, case, events, tallies, dead, poison_ids, crash_at)


def _details(ledger: Path, case: Case, events: list[Event], tallies: list[Tally], dead: list[str],
             poison: set[str], crash_at: float) -> Row:
    """Who moved the poison message, how soon a crashed consumer's delivery came back, per-key order."""
    row: Row = {}
    if poison:
        moved_by_consumer = sum(t.dead_lettered for t in tallies)
        row["dead_lettered_by"] = "consumer" if moved_by_consumer else "broker" if poison <= set(dead) else None
    if crash_at:
        absorbed = sorted(t for tl in tallies for t in tl.absorbed_at)
        row["crash_redelivered_after_s"] = round(absorbed[0] - crash_at, 2) if absorbed else None
    if case.orders:
        row["out_of_order"] = _out_of_order(ledger, {e.event_id: e.seq for e in events})
    return row


async def _memory(site: Site, producer: Broker, queue: str, case: Case, events: list[Event]) -> Row:
    """RSS of the broker's servers with the backlog held at each size of ``case.memory_at`` (no consumer),
    and the slope between the first and the last: bytes per message held, and per copy."""
    durability = await producer.durability()
    row: Row = {"broker": site.kind, "case": case.name, "durability": durability.text(), "server": durability.server,
                "copies": durability.copies, "fsync": durability.fsync, "confirm": durability.confirm}
    points: list[tuple[int, float]] = []
    sent = 0
    rss_before = await asyncio.to_thread(site.rss_bytes)
    for size in case.memory_at:
        await produce_windowed(producer, events[sent:size], window=case.window or 256,
                               deadline_s=case.produce_deadline_s)
        sent = size
        held = await _retry(producer.backlog)
        points.append((int(held), await asyncio.to_thread(site.rss_bytes) / 1e6))
    (n0, mb0), (n1, mb1) = points[0], points[-1]
    slope = (mb1 - mb0) * 1e6 / (n1 - n0) if n1 > n0 else None
    row |= {"rss_before_mb": round(rss_before / 1e6, 1), "memory_points": [(n, round(mb, 1)) for n, mb in points],
            "bytes_per_message": round(slope) if slope is not None else None,
            "bytes_per_message_per_copy": round(slope / durability.copies) if slope is not None else None,
            "backlog_held": points[-1][0], "lost": 0, "charged_twice": 0, "duplicates_absorbed": 0}
    return row


async def _kill_leader_later(site: Site, queue: str, after_s: float) -> tuple[float, int]:
    """kill -9 of the leader after ``after_s``; the time and its port."""
    await asyncio.sleep(after_s)
    at = time.time()
    port = await asyncio.to_thread(site.kill_leader, queue)
    return at, port


def _spawn_crasher(site: Site, queue: str, ledger: Path, settings: Settings) -> subprocess.Popen[bytes]:
    """The crashing consumer; its output goes to ``<ledger>.crasher.log`` (its kill is planned)."""
    argv = [sys.executable, "-m", "labs.compare.consumer_proc", "--kind", site.kind,
            "--address", json.dumps(site.address), "--queue", queue, "--ledger", str(ledger),
            "--consumer", f"{site.kind}-crasher", "--settings", json.dumps(asdict(settings)),
            "--crash-after-charges", str(CRASH_AFTER_CHARGES)]
    with ledger.with_suffix(".crasher.log").open("ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


async def _crash_time(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> float:
    """When the crashing consumer ended (0.0 if it did not within ``timeout_s``: it is killed)."""
    if await poll_async(lambda: proc.poll() is not None, timeout_s, in_thread=False):
        return time.time()
    proc.kill()
    return 0.0


def _applied(ledger: Path) -> set[str]:
    return {str(r[0]) for r in read_rows(ledger, "SELECT event_id FROM applied_events")}


async def _drain(ledger: Path, plog: ProduceLog, poison: set[str], chargers: list[Charger], case: Case,
                 crash_at: float, broker: Broker) -> list[str]:
    """Wait until every confirmed event is charged (the poison one in the broker's dead letters), and
    after a consumer crash until its unacked delivery came back and was absorbed; give up at the case's
    deadline. The dead letters read last (for a poison case; else [])."""
    want = set(plog.confirmed) - poison
    dead: list[str] = []

    async def done() -> bool:
        nonlocal dead
        finished = want <= await asyncio.to_thread(_applied, ledger)
        if poison and finished:  # who moved it: the broker's record decides
            dead = await _retry(broker.dead_letters)
            finished = poison <= set(dead)
        return finished and (not crash_at or any(c.tally.absorbed for c in chargers))

    if not await poll_value_async(done, bool, case.drain_timeout_s, poll_s=0.2):
        log.warning("%s: drain deadline reached", case.name)
    return dead


async def _retry(fn: Any, attempts: int = 5) -> Any:  # a broker's coroutine function; None after 0 attempts
    for i in range(attempts):
        try:
            return await fn()
        except Exception:
            if i == attempts - 1:
                raise
            await asyncio.sleep(1.0)
    return None


def _figures(ledger: Path, plog: ProduceLog, tallies: list[Tally], dead: list[str], poison: set[str],
             started: float) -> Row:
    counts = Counter(str(r[0]) for r in read_rows(ledger, "SELECT event_id FROM charges"))
    charged_at = sorted(float(r[0]) for r in read_rows(ledger, "SELECT charged_at FROM charges"))
    latencies = [ms for t in tallies for ms in t.latencies_ms]
    publish_ms = [a.took_s * 1000 for a in plog.attempts if a.outcome == "confirmed"]  # a window's: its round trip
    confirmed = set(plog.confirmed)
    lost = confirmed - set(counts) - set(dead)
    span_s = (charged_at[-1] - charged_at[0]) if len(charged_at) > 1 else 0.0
    attempts_poison = sum(t.attempts[p] for t in tallies for p in poison)
    return {
        "sent_attempts": len(plog.attempts), "confirmed": len(confirmed),
        "unknown": sum(1 for a in plog.attempts if a.outcome == "unknown"),
        "refused": sum(1 for a in plog.attempts if a.outcome == "refused"), "gave_up": len(plog.gave_up),
        "charged": len(counts), "charged_twice": sum(1 for n in counts.values() if n > 1),
        "duplicates_absorbed": sum(t.absorbed for t in tallies), "dead_lettered": len(dead),
        "lost": len(lost), "lost_ids": sorted(lost)[:10],
        "publish_per_s": round(len(confirmed) / plog.elapsed_s, 1) if plog.elapsed_s else None,
        "publish_p50_ms": _round(percentile(publish_ms, 50)), "publish_p99_ms": _round(percentile(publish_ms, 99)),
        "charges_per_s": round(len(charged_at) / span_s, 1) if span_s else None,
        "p50_ms": _round(percentile(latencies, 50)), "p99_ms": _round(percentile(latencies, 99)),
        "max_ms": _round(max(latencies) if latencies else None),
        "poison_attempts": attempts_poison if poison else None,
        "poison_dead_lettered": bool(poison) and poison <= set(dead),
        "elapsed_s": round(time.time() - started, 2),
        "charge_times_s": [round(t - started, 3) for t in charged_at],
        "latencies_ms": [round(ms, 1) for ms in sorted(latencies)],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _after_fault(ledger: Path, plog: ProduceLog, killed_at: float) -> Row:
    """Seconds from the kill to the first charge of an event first sent after it; the longest gap between charges."""
    first_sent: dict[str, float] = {}
    for a in plog.attempts:
        first_sent.setdefault(a.event_id, a.at)
    rows = read_rows(ledger, "SELECT event_id, charged_at FROM charges ORDER BY charged_at")
    after = [float(t) for eid, t in rows if first_sent.get(str(eid), 0) > killed_at]
    times = [float(t) for _e, t in rows]
    gaps = [b - a for a, b in itertools.pairwise(times) if b > killed_at - 1]
    return {"first_charge_after_kill_s": round(after[0] - killed_at, 2) if after else None,
            "longest_gap_s": round(max(gaps), 2) if gaps else None}


def _out_of_order(ledger: Path, seq_of: dict[str, int]) -> int:
    """Charges whose ``seq`` is lower than an earlier charge of the same order (ledger order)."""
    highest: dict[str, int] = {}
    late = 0
    for eid, order in read_rows(ledger, "SELECT event_id, order_id FROM charges ORDER BY id"):
        seq = seq_of.get(str(eid), 0)
        if seq < highest.get(str(order), -1):
            late += 1
        highest[str(order)] = max(seq, highest.get(str(order), -1))
    return late


