"""Lab 1's scenario: a producer, ``billing-1`` and ``billing-2``, a rescuer, all as threads.

:func:`run_scenario` drives an implementation module (the reference ``solutions.lab1`` or a
student's file with the same functions) against a real Redis:

1. ``ensure_group``; the producer writes ``backlog`` events at once (0 in the course), then
   the consumers start and the producer calls ``produce_one`` every ``produce_interval_ms``;
2. each consumer calls ``consume_once`` in a loop; the rescuer calls ``rescue_once`` every
   ``rescue_interval_ms`` with ``min_idle_ms``, keeping its cursor between rounds;
3. after ``produce_s`` the producer stops and the run drains: it waits (with a deadline)
   until every sent event was processed and XPENDING is empty, then stops the threads.

The work (``handle``) is the scenario's: it takes ``work_ms`` (0 in the course), fails the
first attempt at every ``fail_every``-th event and records every call, with what Redis says of
the message at that moment (still in the PEL? held by whom? delivered how many times?). Every
client the implementation gets names the command in any Redis error it raises
(:mod:`labs.lab1.client`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import ModuleType

import redis
from redis.typing import XPendingRangeEntry

from labs.lab1.client import client as naming_client
from labs.lab1.record import Recorder, Sample, ScenarioResult
from labs.lab1.settings import Lab1Settings
from labs.polling import poll_value
from solutions.connection import is_busygroup

log = logging.getLogger(__name__)

CONSUMERS = ("billing-1", "billing-2")
RESCUER = "rescuer"
ERROR_BACKOFF_S = 0.2

Progress = Callable[[str, Sample], None]


class SimulatedFailure(RuntimeError):
    """The lab's planned failure of the work: the message must stay in the PEL."""


class Work:
    """The simulated work: records each call; the first attempt at every n-th event fails."""

    def __init__(
        self, client: redis.Redis, stream: str, group: str, fail_every: int, rec: Recorder, work_ms: int = 0
    ) -> None:
        self.client, self.stream, self.group = client, stream, group
        self.fail_every, self.rec, self.work_s = fail_every, rec, work_ms / 1000
        self._attempts: dict[int, int] = {}
        self._lock = threading.Lock()

    def pending(self, msg_id: str) -> XPendingRangeEntry | None:
        """``XPENDING stream group msg_id msg_id 1``: the message's PEL row (holder, deliveries), or None once acked."""
        rows = self.client.xpending_range(
            self.stream, self.group, min=msg_id, max=msg_id, count=1
        )
        return rows[0] if rows else None

    def __call__(self, msg_id: str, fields: Mapping[str, str], worker: str) -> None:
        counter = int(fields["counter"])
        row = self.pending(msg_id)
        if self.work_s:
            time.sleep(self.work_s)  # the work itself
        with self._lock:
            attempt = self._attempts[counter] = self._attempts.get(counter, 0) + 1
        fails = counter % self.fail_every == 0 and attempt == 1
        self.rec.add_handled(counter, msg_id, worker, ok=not fails, in_pel=row is not None,
                             owner=str(row["consumer"]) if row else None,
                             deliveries=int(row["times_delivered"]) if row else None)
        if fails:
            raise SimulatedFailure(f"simulated failure of event #{counter} (every {self.fail_every}th)")


def _client(url: str, settings: Lab1Settings) -> redis.Redis:
    return naming_client(url, socket_timeout_s=settings.socket_timeout_s)


def _loop(
    name: str, stop: threading.Event, rec: Recorder, step: Callable[[], object], pause_s: float = 0.0
) -> None:
    """Call ``step`` until ``stop``; errors are recorded and backed off, a stub ends the loop."""
    while not stop.is_set():
        try:
            step()
        except NotImplementedError as exc:
            rec.add_error(name, exc)
            return
        except Exception as exc:
            rec.add_error(name, exc)
            stop.wait(ERROR_BACKOFF_S)
        if pause_s:
            stop.wait(pause_s)


class Scenario:
    """The threads of one run; :func:`run_scenario` is the way to use it."""

    def __init__(self, impl: ModuleType, url: str, settings: Lab1Settings, stream: str, group: str) -> None:
        self.impl, self.url, self.s = impl, url, settings
        self.stream, self.group = stream, group
        self.rec = Recorder()
        self.probe = _client(url, settings)
        self.work = Work(_client(url, settings), stream, group, settings.fail_every, self.rec, settings.work_ms)
        self.produced = threading.Event()
        self.stop = threading.Event()
        self.cursor = "0-0"

    def ensure_group(self) -> None:
        try:
            self.impl.ensure_group(_client(self.url, self.s), self.stream, self.group)
        except Exception as exc:
            self.rec.add_error("ensure_group", exc)
        try:  # the scenario needs the group even when the implementation failed to make it
            self.probe.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if not is_busygroup(exc):  # BUSYGROUP: the implementation made it
                raise

    def produce(self) -> None:
        try:
            self._produce_all(_client(self.url, self.s))
        finally:
            self.produced.set()

    def write_backlog(self) -> bool:
        """Events ``1..backlog`` at once, before any consumer runs; False if the producer cannot send."""
        client = _client(self.url, self.s)
        try:
            return all(self._send(client, counter) for counter in range(1, self.s.backlog + 1))
        finally:
            client.close()

    def _send(self, client: redis.Redis, counter: int) -> bool:
        """One ``produce_one``, recorded; False when the implementation is a stub."""
        try:
            msg_id = self.impl.produce_one(client, self.stream, counter, maxlen=self.s.maxlen)
        except NotImplementedError as exc:
            self.rec.add_error("producer", exc)
            return False
        except Exception as exc:
            self.rec.add_send_error(counter, exc)
            return True
        self.rec.add_sent(counter, str(msg_id))
        return True

    def _produce_all(self, client: redis.Redis) -> None:
        interval_s = self.s.produce_interval_ms / 1000
        next_t = time.monotonic()
        for counter in range(self.s.backlog + 1, self.s.messages + 1):
            if self.stop.wait(max(0.0, next_t - time.monotonic())):
                break
            next_t += interval_s
            if not self._send(client, counter):
                break

    def consume(self, name: str) -> None:
        client = _client(self.url, self.s)
        kwargs = {"block_ms": self.s.block_ms, "count": self.s.count}
        _loop(
            name,
            self.stop,
            self.rec,
            lambda: self.rec.add_return(
                name, self.impl.consume_once(client, self.stream, self.group, name, self.work, **kwargs)
            ),
        )

    def rescue_round(self, client: redis.Redis) -> None:
        cursor, entries = self.impl.rescue_once(
            client,
            self.stream,
            self.group,
            RESCUER,
            self.work,
            min_idle_ms=self.s.min_idle_ms,
            count=100,
            cursor=self.cursor,
        )
        self.cursor = str(cursor)
        for e in entries:
            self.rec.add_journal(
                str(e.msg_id), str(e.from_consumer), str(e.to_consumer), int(e.deliveries), ok=bool(e.ok)
            )

    def rescue(self) -> None:
        client = _client(self.url, self.s)
        interval_s = self.s.rescue_interval_ms / 1000
        while not self.stop.wait(interval_s):
            try:
                self.rescue_round(client)
            except NotImplementedError as exc:
                self.rec.add_error(RESCUER, exc)
                return
            except Exception as exc:
                self.rec.add_error(RESCUER, exc)

    def sample(self) -> Sample:
        """``XLEN`` and the ``XPENDING`` summary (per consumer), recorded."""
        length = int(self.probe.xlen(self.stream))
        summary = self.probe.xpending(self.stream, self.group)
        by_consumer = {str(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
        return self.rec.add_sample(length, by_consumer)

    def drained(self, sample: Sample) -> bool:
        """Nothing more can happen: the PEL is empty and every sent event reached the work.

        (Reached, not succeeded: an implementation that acked a failed message leaves an empty
        PEL and a lost event behind; waiting longer would not bring it back.)
        """
        sent = {s.counter for s in self.rec.sent}
        return sample.pending == 0 and sent <= self.rec.handled_counters()

    def start_threads(self, produce: bool = True) -> list[threading.Thread]:
        targets: list[tuple[str, Callable[[], None]]] = [(RESCUER, self.rescue)]
        if produce:
            targets.append(("producer", self.produce))
        else:
            self.produced.set()
        targets += [(name, functools.partial(self.consume, name)) for name in CONSUMERS]
        threads = [threading.Thread(target=fn, name=f"lab1-{name}", daemon=True) for name, fn in targets]
        for thread in threads:
            thread.start()
        return threads


def run_scenario(
    impl: ModuleType,
    redis_url: str,
    settings: Lab1Settings,
    *,
    stream: str,
    group: str = "billing",
    on_progress: Progress | None = None,
) -> ScenarioResult:
    """Run the lab's scenario against ``impl`` on ``redis_url``; ``stream`` is deleted first."""
    sc = Scenario(impl, redis_url, settings, stream, group)
    sc.probe.delete(stream)
    sc.ensure_group()
    result = ScenarioResult(settings, stream, group, sc.rec)
    threads = sc.start_threads(produce=sc.write_backlog())
    pause_s = settings.sample_interval_ms / 1000
    started = time.monotonic()
    try:
        while not sc.produced.wait(pause_s):
            _report(on_progress, "produce", sc.sample())
        result.produce_s = time.monotonic() - started

        def drained(sample: Sample) -> bool:
            if sc.drained(sample):
                return True
            _report(on_progress, "drain", sample)
            return False

        sample = poll_value(sc.sample, drained, settings.drain_timeout_s, pause_s)
        result.drained = sc.drained(sample)
        _report(on_progress, "done", sample)
        result.drain_s = time.monotonic() - started - result.produce_s
    finally:
        sc.stop.set()
        for thread in threads:
            thread.join(timeout=settings.socket_timeout_s + 1)
    final = sc.sample()
    result.pending_end, result.pending_end_by_consumer = final.pending, final.pending_by_consumer
    result.length_end = final.length
    return result


def _report(on_progress: Progress | None, phase: str, sample: Sample) -> None:
    if on_progress is not None:
        on_progress(phase, sample)
