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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypedDict

from labs.compare.consumer import Charger, Tally, consume
from labs.compare.contract import Settings
from labs.compare.producer import ProduceLog, make_events, produce
from labs.compare.sites import Site
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
    backlog_held: int
    rss_before_mb: float
    rss_held_mb: float
    rss_mb_per_million: float
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


@dataclass(frozen=True)
class Case:
    name: str
    events: int
    rate_per_s: float = 0.0  # 0: as fast as confirms come back
    consumers: int = 2
    kill_leader_at_s: float = 0.0  # > 0: kill -9 of the queue's leader this long after the start
    orders: int = 0  # > 0: events cycle over this many order ids (per-key order)
    poison: bool = False  # one event whose handling always fails
    crash_consumer: bool = False  # a consumer process that kills itself between a charge and its ack
    hold: bool = False  # publish everything before any consumer starts (backlog, RSS)
    drain_timeout_s: float = 60.0
    produce_deadline_s: float = 120.0  # the producer stops re-sending after this (the rest: gave up)
    restart_killed: bool = True  # start the killed leader again afterwards (and wait for its replicas)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def run_case(site: Site, case: Case, settings: Settings, work: Path) -> Row:
    """Run ``case`` on ``site`` once; the row of figures."""
    queue = f"{case.name}-{uuid.uuid4().hex[:6]}"
    ledger = work / f"{site.kind.replace('+', '-')}-{queue}.sqlite3"
    events = make_events(queue, case.events, orders=case.orders, poison_at=case.events // 2 if case.poison else -1)
    poison_ids = {e.event_id for e in events if e.amount == "poison"}
    producer = site.broker(queue, settings)
    await producer.connect()
    brokers = [site.broker(queue, settings) for _ in range(case.consumers)]
    chargers = [Charger(ledger, f"{site.kind}-c{i}", max_attempts=settings.max_attempts) for i in range(case.consumers)]
    stop = asyncio.Event()
    rss_before = await asyncio.to_thread(site.rss_bytes)
    row: Row = {"broker": site.kind, "case": case.name, "durability": producer.durability()}
    plog: ProduceLog | None = None
    if case.hold:
        plog = await produce(producer, events, rate_per_s=case.rate_per_s, deadline_s=case.produce_deadline_s)
        row["backlog_held"] = await producer.backlog()
        rss_held = await asyncio.to_thread(site.rss_bytes)
        row["rss_before_mb"] = round(rss_before / 1e6, 1)
        row["rss_held_mb"] = round(rss_held / 1e6, 1)
        row["rss_mb_per_million"] = round((rss_held - rss_before) / 1e6 / max(1, row["backlog_held"]) * 1e6, 0)
    crash_at = 0.0
    if case.crash_consumer:  # everything published first, then the crasher alone: it charges, dies unacked
        plog = await produce(producer, events, rate_per_s=case.rate_per_s, deadline_s=case.produce_deadline_s)
        crash_at = await _crash_time(_spawn_crasher(site, queue, ledger, settings))
    for b in brokers:
        await b.connect()
    tasks = [asyncio.create_task(consume(b, c, stop)) for b, c in zip(brokers, chargers, strict=True)]
    fault: asyncio.Task[tuple[float, int]] | None = None
    if case.kill_leader_at_s:
        fault = asyncio.create_task(_kill_leader_later(site, queue, case.kill_leader_at_s, case.restart_killed))
    started = time.time()
    if plog is None:
        plog = await produce(producer, events, rate_per_s=case.rate_per_s, deadline_s=case.produce_deadline_s)
    killed_at, killed_port = await fault if fault else (0.0, 0)
    await _drain(ledger, plog, poison_ids, chargers, case, crash_at)
    stop.set()
    tallies: list[Tally] = list(await asyncio.gather(*tasks))
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
    if crash_at:
        absorbed = sorted(t for tl in tallies for t in tl.absorbed_at)
        row["crash_redelivered_after_s"] = round(absorbed[0] - crash_at, 2) if absorbed else None
    if case.orders:
        row["out_of_order"] = _out_of_order(ledger, {e.event_id: e.seq for e in events})
    return row


async def _kill_leader_later(site: Site, queue: str, after_s: float, restart: bool) -> tuple[float, int]:
    """kill -9 of the leader after ``after_s``; with ``restart`` it is started again at once, as an operator
    would (Redis with WAIT 1 needs a replica again before it confirms anything)."""
    await asyncio.sleep(after_s)
    at = time.time()
    port = await asyncio.to_thread(site.kill_leader, queue)
    if restart:
        await asyncio.to_thread(site.restart, port, queue)
    return at, port


def _spawn_crasher(site: Site, queue: str, ledger: Path, settings: Settings) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "labs.compare.consumer_proc", "--kind", site.kind,
            "--address", json.dumps(site.address), "--queue", queue, "--ledger", str(ledger),
            "--consumer", f"{site.kind}-crasher", "--settings", json.dumps(asdict(settings)),
            "--crash-after-charges", str(CRASH_AFTER_CHARGES)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


async def _crash_time(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            return 0.0
        await asyncio.sleep(0.05)
    return time.time()


def _applied(ledger: Path) -> set[str]:
    return {str(r[0]) for r in read_rows(ledger, "SELECT event_id FROM applied_events")}


async def _drain(ledger: Path, plog: ProduceLog, poison: set[str], chargers: list[Charger], case: Case,
                 crash_at: float) -> None:
    """Wait until every confirmed event is charged (the poison one dead-lettered), and after a consumer
    crash until its unacked delivery came back and was absorbed; give up at the case's deadline."""
    deadline = time.monotonic() + case.drain_timeout_s
    want = set(plog.confirmed) - poison
    while time.monotonic() < deadline:
        done = want <= await asyncio.to_thread(_applied, ledger)
        if poison:
            done = done and sum(c.tally.dead_lettered for c in chargers) >= len(poison)
        if crash_at:
            done = done and any(c.tally.absorbed for c in chargers)
        if done:
            return
        await asyncio.sleep(0.1)
    log.warning("%s: drain deadline reached", case.name)


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


