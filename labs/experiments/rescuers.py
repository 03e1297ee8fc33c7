"""The rescuer (course module 3, section 3.3): the XAUTOCLAIM cursor, no ack on failure, one per group.

- :func:`cursor_vs_restart`: ``XAUTOCLAIM`` looks at no more than ``COUNT * 10`` PEL entries
  per call and returns a cursor. The course's loop starts every tick from ``0-0``: when the
  head of the PEL is held by a live consumer (not idle), the idle entries behind it are
  never reached. Following the cursor reaches them on the next call.
- :func:`ack_after_failure`: the course's rescuer acks after ``Handle`` whatever it
  returned; a failed handling is then acked and lost. Without that ack it is retried.
- :func:`rescuers_race`: several rescuers claiming in a loop take entries from each other
  (another rescuer's batch waits longer than min idle); one rescuer per group, chosen by a
  lease in Redis (``SET key me NX PX``), does not.

Tests in ``tests/test_rescuers.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

from labs.experiments.read_loop import GROUP, fresh_group, poll

RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""


def _claim(
    client: redis.Redis, stream: str, to: str, min_idle_ms: int, start: str, count: int
) -> tuple[str, list[str]]:
    reply: Any = client.xautoclaim(stream, GROUP, to, min_idle_time=min_idle_ms, start_id=start, count=count)
    return str(reply[0]), [str(msg_id) for msg_id, _fields in reply[1]]


@dataclass(frozen=True)
class CursorRun:
    """Idle entries behind a busy PEL head, and how many each loop rescued in ``ticks`` calls."""

    busy_head: int
    idle_tail: int
    rescued_restarting: int
    rescued_with_cursor: int


def cursor_vs_restart(
    client: redis.Redis, stream: str, *, busy_head: int = 400, idle_tail: int = 20, count: int = 32, ticks: int = 5
) -> CursorRun:
    """Two rescuers on the same PEL shape: one restarts from ``0-0`` each tick, one follows the cursor."""
    min_idle_ms = 200
    results = []
    for follow_cursor in (False, True):
        ids = fresh_group(client, stream, busy_head + idle_tail)
        client.xreadgroup(GROUP, "dead", {stream: ">"}, count=busy_head + idle_tail)  # dies holding all
        poll(lambda: _oldest_idle_ms(client, stream) >= min_idle_ms, timeout_s=5)
        client.xclaim(stream, GROUP, "live", 0, list[Any](ids[:busy_head]), justid=True)  # a live, busy consumer's head
        cursor, rescued = "0-0", 0
        for _ in range(ticks):
            start = cursor if follow_cursor else "0-0"
            cursor, claimed = _claim(client, stream, "rescuer", min_idle_ms, start, count)
            rescued += len(claimed)
        results.append(rescued)
    return CursorRun(busy_head, idle_tail, results[0], results[1])


def _oldest_idle_ms(client: redis.Redis, stream: str) -> int:
    rows = client.xpending_range(stream, GROUP, "-", "+", 1)
    return int(rows[0]["time_since_delivered"]) if rows else 0


@dataclass(frozen=True)
class FailureRun:
    """What a rescuer did with handlings that failed once."""

    entries: int
    failed_once: int
    done: int  # distinct entries whose work succeeded
    acked_not_done: int  # acked although the work never succeeded: lost
    pending_left: int


def ack_after_failure(
    client: redis.Redis, stream: str, *, course: bool, entries: int = 9, rounds: int = 3
) -> FailureRun:
    """A dead consumer's entries; the rescuer's handler fails the first try of every third one."""
    min_idle_ms = 50
    ids = fresh_group(client, stream, entries)
    client.xreadgroup(GROUP, "dead", {stream: ">"}, count=entries)
    tries: Counter[str] = Counter()
    done: set[str] = set()
    acked: set[str] = set()
    for _ in range(rounds):
        if not int(client.xpending(stream, GROUP)["pending"]):
            break
        poll(lambda: _oldest_idle_ms(client, stream) >= min_idle_ms, timeout_s=5)
        cursor = "0-0"
        while True:
            cursor, claimed = _claim(client, stream, "rescuer", min_idle_ms, cursor, 32)
            for msg_id in claimed:
                tries[msg_id] += 1
                ok = not (ids.index(msg_id) % 3 == 0 and tries[msg_id] == 1)  # a transient failure
                if ok:
                    done.add(msg_id)
                if ok or course:  # the course acks whatever Handle returned
                    client.xack(stream, GROUP, msg_id)
                    acked.add(msg_id)
            if cursor == "0-0":
                break
    failed_once = sum(1 for i in range(entries) if i % 3 == 0)
    pending = int(client.xpending(stream, GROUP)["pending"])
    return FailureRun(entries, failed_once, len(done), len(acked - done), pending)


@dataclass(frozen=True)
class RaceRun:
    """Rescuers on one dead consumer's PEL: handlings, duplicates, steals between rescuers, time."""

    rescuers: int
    lease: bool
    entries: int
    processings: int
    duplicates: int
    stolen_from_rescuers: int
    elapsed_s: float


def rescuers_race(
    redis_url: str,
    stream: str,
    *,
    rescuers: int,
    lease: bool,
    entries: int = 30,
    count: int = 10,
    work_ms: int = 30,
    min_idle_ms: int = 100,
    timeout_s: float = 20.0,
) -> RaceRun:
    """``rescuers`` threads claim ``count`` at a time and handle one by one; with ``lease`` only the holder claims."""
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        fresh_group(client, stream, entries)
        client.delete(f"{stream}:rescuer-lease")
        client.xreadgroup(GROUP, "dead", {stream: ">"}, count=entries)
        poll(lambda: _oldest_idle_ms(client, stream) >= min_idle_ms, timeout_s=5)
        race = _Race(redis_url, stream, lease, count, work_ms, min_idle_ms)
        started = time.monotonic()
        threads = [
            threading.Thread(target=race.rescuer, args=(f"rescuer-{i}", i * 0.05), daemon=True)
            for i in range(rescuers)
        ]
        for thread in threads:
            thread.start()
        poll(lambda: int(client.xpending(stream, GROUP)["pending"]) == 0, timeout_s=timeout_s)
        race.stop.set()
        for thread in threads:
            thread.join(timeout=5)
        handled = Counter(race.processings)
        return RaceRun(
            rescuers,
            lease,
            entries,
            sum(handled.values()),
            sum(handled.values()) - len(handled),
            len(race.stolen),
            time.monotonic() - started,
        )


class _Race:
    def __init__(self, redis_url: str, stream: str, lease: bool, count: int, work_ms: int, min_idle_ms: int):
        self.redis_url, self.stream, self.lease = redis_url, stream, lease
        self.count, self.work_s, self.min_idle_ms = count, work_ms / 1000, min_idle_ms
        self.stop = threading.Event()
        self.processings: list[str] = []
        self.stolen: list[str] = []
        self.claimed_by: dict[str, str] = {}

    def rescuer(self, name: str, start_after_s: float) -> None:
        self.stop.wait(start_after_s)  # rescuers tick on their own timers, out of phase
        with contextlib.closing(redis.Redis.from_url(self.redis_url, decode_responses=True)) as client:
            renew = client.register_script(RENEW_LUA)
            cursor = "0-0"
            while not self.stop.is_set():
                if self.lease and not renew(keys=[f"{self.stream}:rescuer-lease"], args=[name, 2000]):
                    self.stop.wait(0.02)  # someone else is the group's rescuer
                    continue
                cursor, claimed = _claim(client, self.stream, name, self.min_idle_ms, cursor, self.count)
                for msg_id in claimed:
                    if self.claimed_by.get(msg_id, name) != name:
                        self.stolen.append(msg_id)  # another rescuer was still on it
                    self.claimed_by[msg_id] = name
                for msg_id in claimed:
                    time.sleep(self.work_s)  # handle, one after another
                    self.processings.append(msg_id)
                    client.xack(self.stream, GROUP, msg_id)
                if not claimed:
                    self.stop.wait(0.02)

