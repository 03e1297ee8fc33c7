"""The graceful failover window: how long the old master keeps acknowledging writes, per client.

``SENTINEL FAILOVER`` (what ``make failover`` sends) promotes the replica with ``REPLICAOF NO
ONE`` while the old master keeps running as a master. Sentinel announces the new master
(``+switch-master`` on its Pub/Sub) about a second later, but it reconfigures the old master
(``+convert-to-slave``: ``REPLICAOF`` plus ``CLIENT KILL TYPE normal``) only later. Redis 7.0's
``src/sentinel.c`` decides so:

- at ``+switch-master`` (``sentinelResetMasterAndChangeAddress``, right after the event) each
  sentinel drops its instances and creates the old master's address anew as a *replica*, with a
  new link and ``info_refresh = 0``, so it is sent ``INFO`` at once;
- ``sentinelRefreshInstanceInfo`` runs on every ``INFO`` reply. The first one says ``role:master``
  where the sentinel expects a replica, so it sets ``role_reported_time`` to now: the clock
  starts at that reply, after the sentinel's own ``+switch-master``;
- on a later reply the "slave -> master" branch sends ``REPLICAOF`` only when the server has
  claimed the master role for more than ``sentinel_publish_period * 4`` = 8 s
  (:data:`SENTINEL_RECONFIG_WAIT_S`; "to receive new configs if any"), the sentinel is not in
  TILT, the new master looks sane and neither instance was down for those 8 s;
- ``INFO`` goes to a replica every ``sentinel_info_period`` = 10 s (every 1 s only while its
  master is down or failing over), so the reply that passes the check is the second, about
  10 s after the switch.

So on the converting sentinel's own clock ``+convert-to-slave`` comes more than 8 s after its
``+switch-master``, whatever the load: a loaded machine (or TILT, which skips the acting half
for 30 s) only makes it later. Only the conversion *of the old master* counts: a slow sentinel
can still convert another server in the window, such as a replica that rejoined just before it
(an ``INFO`` reply from before that replica's first conversion, handled late), and that event
says nothing about this failover. A Pub/Sub listener's sights can be late by seconds on a loaded
machine, so that wait is read from the sentinels' logs (:mod:`labs.experiments.sentinel_log`).
Every write the old master acknowledges meanwhile is lost when it resyncs from the new master.

How much a client writes into that window depends on the client, not on Redis:

- ``plain``: ``Sentinel(...).master_for(...)`` as redis-py gives it. It asks Sentinel for the
  address only when it opens a connection, so its open connection stays on the old master
  until Sentinel's ``CLIENT KILL`` (or a ``READONLY`` reply) breaks it;
- ``watched``: the same client plus :class:`solutions.failover_watch.FailoverWatch`, which
  drops the pool's connections on ``+switch-master``, so the next command reconnects through
  Sentinel to the new master.

:func:`graceful_window` runs both side by side, each sending one ``XADD`` every
``interval_ms`` to a stream of its own, and counts against the writers' own records the
acknowledged writes that the new master lacks: the ones the old master took in the window.
Tests in ``tests/test_failover_window.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import redis
import redis.asyncio as aioredis

from labs.experiments import sentinel_log
from labs.launcher.errors import LauncherError
from labs.launcher.process import command
from labs.launcher.sentinel import MASTER_NAME, ask_failover, async_master_client, pairs
from labs.launcher.topology import Address, SentinelTopology
from labs.polling import poll_value_async
from solutions.cancelling import cancel_and_wait
from solutions.failover_watch import FailoverWatch

log = logging.getLogger(__name__)

EVENTS = ("+promoted-slave", "+switch-master", "+convert-to-slave")
SENTINEL_PUBLISH_PERIOD_S = 2.0  # sentinel.c: sentinel_publish_period (hello messages)
SENTINEL_INFO_PERIOD_S = 10.0  # sentinel.c: sentinel_info_period, INFO to a replica whose master is up
SENTINEL_RECONFIG_WAIT_S = 4 * SENTINEL_PUBLISH_PERIOD_S  # sentinelRefreshInstanceInfo: a "replica" claiming master
SOCKET_TIMEOUT_S = 2.0
BACKGROUND_STOP_TIMEOUT_S = 5.0  # the event listeners and the watch (solutions.cancelling)
# ~10 s is the rule (8 s, checked on a 10 s INFO); a sentinel starved for over 2 s stops acting for 30 s (TILT)
DEMOTE_TIMEOUT_S = 45.0


@dataclass(frozen=True)
class WriterRun:
    """One client's writes: acknowledged ids and errors, with times in s from the failover request."""

    name: str
    acknowledged: tuple[tuple[float, str], ...]
    errors: tuple[tuple[float, str], ...]
    lost_at: tuple[float, ...] = ()  # ack times of the acknowledged ids the new master lacks

    @property
    def lost(self) -> int:
        return len(self.lost_at)

    @property
    def window_s(self) -> float:
        """From the failover request to the last write the old master acknowledged and lost."""
        return max(self.lost_at, default=0.0)

    def longest_pause_s(self, after_s: float) -> float:
        """The longest time between two consecutive writes (acknowledged or failed) from ``after_s`` on:
        how late a write can come after a moment it was due at (a starved event loop stretches it)."""
        ticks = sorted(t for t, _ in (*self.acknowledged, *self.errors) if t >= after_s)
        return max((b - a for a, b in itertools.pairwise(ticks)), default=0.0)


@dataclass(frozen=True)
class GracefulWindow:
    """A ``SENTINEL FAILOVER`` with two clients writing through it."""

    old_master: Address
    new_master: Address
    # each sentinel's own first sight of each event, s from the failover request: {port: {event: s}}
    by_sentinel: dict[int, dict[str, float]]
    demoted_s: float  # when the old master first reported role:slave (polled)
    plain: WriterRun
    watched: WriterRun
    interval_ms: int = field(default=50)
    # each sentinel's events as its log stamps them (its own clock), s from the request: {port: {event: s}}
    logged: dict[int, dict[str, float]] = field(default_factory=dict)
    sentinels_state: str = ""  # each sentinel's TILT flag and master, read after the demotion
    # logged events about another server than the old master (not counted), one line each
    others: tuple[str, ...] = ()

    @property
    def events(self) -> dict[str, float]:
        """The first sight of each Sentinel event on any sentinel."""
        return _first_sights(self.by_sentinel)

    @property
    def switch_s(self) -> float:
        return self.events["+switch-master"]

    @property
    def reconfig_wait_s(self) -> float:
        """Sentinel's own wait, on the sentinel that reconfigured the old master, on its own clock (its
        log): from its ``+switch-master`` (when it made the old master a "replica" to watch) to its
        ``+convert-to-slave``. More than :data:`SENTINEL_RECONFIG_WAIT_S` by construction (see above)."""
        return _wait_s(self.logged, self)

    @property
    def seen_reconfig_wait_s(self) -> float:
        """The same wait between the event listener's sights (late by however long its loop was busy)."""
        return _wait_s(self.by_sentinel, self)

    @property
    def converted_s(self) -> float:
        """When a sentinel converted the old master (its log, s from the request)."""
        firsts = [seen["+convert-to-slave"] for seen in self.logged.values() if "+convert-to-slave" in seen]
        if not firsts:
            raise ValueError(f"no sentinel logged +convert-to-slave:\n{self.explain()}")
        return min(firsts)

    def explain(self) -> str:
        """Everything the window's asserts depend on, one line each: the timers, each sentinel's
        events as logged and as seen (s from the request), its TILT, and both clients' figures."""
        lines = [f"timers (sentinel.c 7.0): convert after > {SENTINEL_RECONFIG_WAIT_S:g} s claiming master "
                 f"(4 x publish period {SENTINEL_PUBLISH_PERIOD_S:g} s), checked on INFO every "
                 f"{SENTINEL_INFO_PERIOD_S:g} s; TILT after a timer gap > 2 s stops acting for 30 s; "
                 f"writers tick every {self.interval_ms} ms"]
        for port in sorted({*self.logged, *self.by_sentinel}):
            logged, seen = self.logged.get(port, {}), self.by_sentinel.get(port, {})
            said = ", ".join(f"{event} logged {at:.3f}" + (f" seen {seen[event]:.3f}" if event in seen else "")
                             for event, at in sorted(logged.items(), key=lambda item: item[1]))
            unlogged = ", ".join(f"{e} seen {t:.3f} (not in the log)" for e, t in seen.items() if e not in logged)
            lines.append(f"sentinel {port}: {said or 'nothing logged'}{'; ' + unlogged if unlogged else ''}")
        lines.extend(f"not counted (another server): {line}" for line in self.others)
        lines.append(f"after the demotion: {self.sentinels_state or 'not read'}; old master role:slave at "
                     f"{self.demoted_s:.3f} s")
        for run in (self.plain, self.watched):
            lines.append(f"{run.name}: {len(run.acknowledged)} acknowledged, {run.lost} lost, last lost at "
                         f"{run.window_s:.3f} s, longest pause {run.longest_pause_s(0.0):.3f} s, "
                         f"errors {[(round(t, 2), e) for t, e in run.errors][:5]}")
        return "\n".join(lines)


def _wait_s(sights: dict[int, dict[str, float]], window: GracefulWindow) -> float:
    """``+convert-to-slave`` minus ``+switch-master`` on the sentinel that did both (the least, if more did)."""
    waits = [seen["+convert-to-slave"] - seen["+switch-master"] for seen in sights.values()
             if "+convert-to-slave" in seen and "+switch-master" in seen]
    if not waits:
        raise ValueError(f"no sentinel both switched and converted:\n{window.explain()}")
    return min(waits)


def about_old_master(old: Address) -> Callable[[str, str], bool]:
    """Whether an event (name, detail) belongs to this failover: a ``+convert-to-slave`` only when it
    converts ``old`` (Sentinel writes ``slave <ip>:<port> <ip> <port> @ <master> ...``)."""
    subject = f"slave {old[0]}:{old[1]} "
    return lambda event, detail: event != "+convert-to-slave" or detail.startswith(subject)


def plain_client(sentinels: tuple[Address, ...]) -> aioredis.Redis:
    """``Sentinel(...).master_for(MASTER_NAME)``: redis-py's client of the master, nothing added."""
    return async_master_client(sentinels, MASTER_NAME, socket_timeout=SOCKET_TIMEOUT_S)


@dataclass
class _Writer:
    """One ``XADD`` per tick to a stream of its own; the acknowledged ids and the errors, timed."""

    name: str
    client: aioredis.Redis
    stream: str
    acks: list[tuple[float, str]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)

    async def run(self, interval_ms: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            tick = time.monotonic()
            try:
                reply = await self.client.xadd(self.stream, {"t": f"{tick:.3f}"})
                self.acks.append((tick, reply.decode() if isinstance(reply, bytes) else str(reply)))
            except redis.RedisError as exc:  # counted, and the next tick tries again
                self.errors.append((tick, type(exc).__name__))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, interval_ms / 1000 - (time.monotonic() - tick)))

    def result(self, kept: set[str], started: float) -> WriterRun:
        """Times from ``started``; ``lost_at``: acknowledged after ``started`` and not in ``kept``."""
        return WriterRun(
            self.name,
            tuple((t - started, msg_id) for t, msg_id in self.acks),
            tuple((t - started, error) for t, error in self.errors),
            tuple(t - started for t, msg_id in self.acks if t >= started and msg_id not in kept),
        )


def _first_sights(by_sentinel: dict[int, dict[str, float]]) -> dict[str, float]:
    first: dict[str, float] = {}
    for seen in by_sentinel.values():
        for event, at in seen.items():
            first[event] = min(at, first.get(event, at))
    return first


async def _listen_events(sentinels: tuple[Address, ...], by_sentinel: dict[int, dict[str, float]],
                         subscribed: list[Address], keep: Callable[[str, str], bool]) -> None:
    """First sight of each of :data:`EVENTS` on any sentinel's Pub/Sub; ``subscribed`` lists the sentinels
    whose subscription is confirmed (an event published before that is missed, and a late first sight of
    ``+switch-master`` would shorten the wait measured from it). Only events that ``keep(event, detail)``
    accepts are recorded."""

    async def one(address: Address) -> None:
        client = aioredis.Redis(host=address[0], port=address[1])
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(*EVENTS)
                while await pubsub.get_message(timeout=1.0) is None:  # the confirmations of the subscribe
                    pass
                subscribed.append(address)
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    event, detail = message["channel"].decode(), message["data"].decode(errors="replace")
                    if keep(event, detail):
                        by_sentinel.setdefault(address[1], {}).setdefault(event, time.monotonic())
        finally:
            await client.aclose()

    await asyncio.gather(*(one(address) for address in sentinels))


async def _poll(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> float:
    """Await ``check`` every 20 ms until true; the monotonic time it became true."""
    if not await poll_value_async(check, bool, timeout_s, 0.02):
        raise LauncherError(f"timed out after {timeout_s:.0f} s waiting for {what}")
    return time.monotonic()


async def graceful_window(
    topology: SentinelTopology, *, prefix: str, interval_ms: int = 50, timeout_s: float = 30.0
) -> GracefulWindow:
    """``SENTINEL FAILOVER`` on a ready ``sentinel`` topology while both clients write; count the window.

    Returns once the old master is a replica again and both clients have written to the new
    master after that. The topology stays up with the roles swapped.
    """
    sentinels = tuple(("127.0.0.1", proc.port) for proc in topology.sentinels)
    # a settled topology: a sentinel whose last INFO of a replica is stale (it rejoined moments ago)
    # may convert that replica again in the window, or abort the failover for want of a good replica
    await asyncio.to_thread(topology.wait_ready, replica_views=True)
    old = topology.master_addr()
    writers = [_Writer(name, plain_client(sentinels), f"{prefix}{name}") for name in ("plain", "watched")]
    watch = FailoverWatch(writers[1].client, sentinels, MASTER_NAME)
    old_probe = aioredis.Redis(host=old[0], port=old[1], socket_timeout=SOCKET_TIMEOUT_S)
    stop, listening = asyncio.Event(), list[Address]()
    by_sentinel: dict[int, dict[str, float]] = {}
    keep = about_old_master(old)
    background = [asyncio.create_task(_listen_events(sentinels, by_sentinel, listening, keep)),
                  asyncio.create_task(watch.run())]
    writing = [asyncio.create_task(w.run(interval_ms, stop)) for w in writers]
    try:
        await _poll(lambda: _started(watch, writers, listening, len(sentinels)), 10,
                    "the writers, the watch and the event listeners to start")
        started, started_wall = time.monotonic(), time.time()
        await asyncio.to_thread(ask_failover, topology.sentinels, started + timeout_s)
        try:
            demoted = await _poll(lambda: _role_is(old_probe, "slave"), DEMOTE_TIMEOUT_S,
                                  "Sentinel to demote the old master")
        except LauncherError as exc:
            since = {k: round(v - started, 1) for k, v in _first_sights(by_sentinel).items()}
            raise LauncherError(f"{exc}; events seen (s after the request): {since}; "
                                f"{await asyncio.to_thread(_sentinels_state, topology)}") from None
        counts = [len(w.acks) for w in writers]
        await _poll(lambda: _wrote_since(writers, counts), 10, "both clients to write after the demotion")
    finally:
        stop.set()
        await cancel_and_wait(background, BACKGROUND_STOP_TIMEOUT_S)
        await asyncio.gather(*writing, return_exceptions=True)
        for client in (*(w.client for w in writers), old_probe):
            await client.aclose()
    new = topology.master_addr()
    with contextlib.closing(topology.server(new[1]).client()) as on_new:
        plain, watched = (w.result(_ids(on_new, w.stream), started) for w in writers)
    logs = {proc.port: sentinel_log.read_events(proc.logfile, started_wall) for proc in topology.sentinels}
    window = GracefulWindow(
        old, new, {port: {k: v - started for k, v in seen.items()} for port, seen in by_sentinel.items()},
        demoted - started, plain, watched, interval_ms,
        {port: sentinel_log.first_sights(events, started_wall, keep) for port, events in logs.items()},
        await asyncio.to_thread(_sentinels_state, topology),
        tuple(f"sentinel {port}: {e.event} {e.detail} logged {e.at_wall_s - started_wall:.3f}"
              for port, events in logs.items() for e in events if not keep(e.event, e.detail)),
    )
    log.info("graceful failover %s -> %s: %s", old, new, window)
    return window


def _sentinels_state(topology: SentinelTopology) -> str:
    """Each sentinel's TILT flag, the master it names and its configured timers, for an error message."""
    said = []
    for proc in topology.sentinels:
        try:
            with contextlib.closing(proc.client()) as client:
                info = client.info("sentinel")
                master = pairs(command(client, "SENTINEL", "MASTER", MASTER_NAME))
                said.append(f"{proc.name}: tilt {info.get('sentinel_tilt')}, {info.get('master0')}, "
                            f"down-after {master.get('down-after-milliseconds')} ms, "
                            f"failover-timeout {master.get('failover-timeout')} ms")
        except redis.RedisError as exc:
            said.append(f"{proc.name}: {exc}")
    return "; ".join(said)


def _ids(client: redis.Redis, stream: str) -> set[str]:
    """Every id the stream holds (``XRANGE - +``; the writers' streams are a few hundred entries)."""
    entries = client.xrange(stream) or []  # XRANGE answers an array, never nil
    return {msg_id.decode() if isinstance(msg_id, bytes) else str(msg_id) for msg_id, _ in entries}


async def _started(watch: FailoverWatch, writers: list[_Writer], listening: list[Address], n_sentinels: int) -> bool:
    return watch.subscribed == n_sentinels == len(listening) and all(len(w.acks) >= 3 for w in writers)


async def _role_is(client: aioredis.Redis, role: str) -> bool:
    try:
        info = await client.info("replication")
    except redis.RedisError:
        return False
    return bool(info.get("role") == role)


async def _wrote_since(writers: list[_Writer], counts: list[int]) -> bool:
    return all(len(w.acks) > n + 2 for w, n in zip(writers, counts, strict=True))
