"""CPU time of the publishing client and of a row's broker processes over one publish, from /proc.

A process's time is the sum over its threads of ``/proc/<pid>/task/<tid>/schedstat``: the time it ran on
a CPU and the time it waited in the run queue for one (ns), over every process of its process group
when it leads one (a RabbitMQ node's ``erl_child_setup``, a Redis AOF child). Without schedstat it is
``utime + stime`` of ``/proc/<pid>/stat`` (clock ticks; the wait is then unknown). The machine's busy
time is ``/proc/stat``'s first line without idle and iowait. The client is this process: every thread
of it, the publishing loop and whatever runs beside it (in a hold case nothing else: the consumers
start after the publish).

:func:`snapshot` before and after, :func:`figures` of the two: :class:`CpuFigures`, a row's ``cpu``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

PROC = Path("/proc")
NS_PER_S = 1e9
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Times:
    """A process's (or a group's) CPU so far: on a CPU, and waiting in the run queue (None: not known)."""

    on_cpu_s: float
    waiting_s: float | None

    def __add__(self, other: Times) -> Times:
        waiting = None if self.waiting_s is None or other.waiting_s is None else self.waiting_s + other.waiting_s
        return Times(self.on_cpu_s + other.on_cpu_s, waiting)


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state is [0], pgrp [2], utime [11])."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[-1].split()


def process_times(pid: int) -> Times | None:
    """CPU of one process, all its threads (None: it is gone)."""
    on_cpu = waiting = 0.0
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return None
    seen = False
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            ran_ns, waited_ns, _slices = (task / "schedstat").read_text().split()
            on_cpu += int(ran_ns) / NS_PER_S
            waiting += int(waited_ns) / NS_PER_S
            seen = True
    if seen:
        return Times(on_cpu, waiting)
    fields = _stat_fields(pid)  # no schedstat here: ticks, no wait
    if fields is None:
        return None
    return Times((int(fields[11]) + int(fields[12])) / CLK_TCK, None)


def _group_members() -> dict[int, list[int]]:
    """Process group -> its processes, from one pass over /proc."""
    groups: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) is not None:
            with contextlib.suppress(ValueError, IndexError):
                groups.setdefault(int(fields[2]), []).append(int(entry.name))
    return groups


def group_times(pid: int, groups: Mapping[int, list[int]] | None = None) -> Times | None:
    """CPU of ``pid`` and, when it leads a process group other than ours, of every process in that group."""
    own = process_times(pid)
    if own is None:
        return None
    if pid == os.getpgrp():
        return own
    groups = _group_members() if groups is None else groups
    for member in groups.get(pid, []):
        if member != pid and (more := process_times(member)) is not None:
            own = own + more
    return own


def machine_busy_s() -> float:
    """CPU seconds every core of the machine spent busy since boot (``/proc/stat``: not idle, not iowait)."""
    fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal (guest is in user)
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


def cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Snapshot:
    at_s: float  # time.monotonic()
    client: Times
    brokers: dict[str, Times | None]  # a broker process's label -> its group's CPU (None: not running)
    machine_busy_s: float


def snapshot(pids: Mapping[str, int | None]) -> Snapshot:
    """This process, the broker processes ``pids`` (label -> pid) and the machine, now."""
    groups = _group_members()
    brokers = {label: group_times(pid, groups) if pid else None for label, pid in pids.items()}
    client = process_times(os.getpid()) or Times(time.process_time(), None)
    return Snapshot(time.monotonic(), client, brokers, machine_busy_s())


class CpuFigures(TypedDict):
    """One publish's CPU: seconds over ``wall_s``, for ``messages`` confirmed messages."""

    wall_s: float
    messages: int
    client_cpu_s: float  # this process (the publishing client)
    client_wait_s: float | None  # its threads' time waiting in the run queue for a CPU
    broker_cpu_s: float  # every process of the row's cluster
    broker_wait_s: float | None
    busiest: str  # the broker process that used the most CPU
    busiest_cpu_s: float
    machine_busy_s: float  # every core of the machine
    others_cpu_s: float  # the machine's busy time not spent by the client or the broker (other work)
    cores: int
    load_1m: float  # the machine's load average at the end


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else max(0.0, after - before)


def figures(before: Snapshot, after: Snapshot, messages: int) -> CpuFigures:
    """What the client, the broker's processes and the rest of the machine spent between two snapshots."""
    per_process: dict[str, float] = {}
    broker_wait: float | None = 0.0
    for label, start in before.brokers.items():
        end = after.brokers.get(label)
        if start is None or end is None:  # started or ended in between: not comparable
            continue
        per_process[label] = max(0.0, end.on_cpu_s - start.on_cpu_s)
        wait = _delta(end.waiting_s, start.waiting_s)
        broker_wait = None if broker_wait is None or wait is None else broker_wait + wait
    client = max(0.0, after.client.on_cpu_s - before.client.on_cpu_s)
    broker = sum(per_process.values())
    machine = max(0.0, after.machine_busy_s - before.machine_busy_s)
    busiest = max(per_process, key=lambda k: per_process[k], default="")
    return CpuFigures(wall_s=round(max(0.0, after.at_s - before.at_s), 6), messages=messages,
                      client_cpu_s=round(client, 6), client_wait_s=_round(_delta(after.client.waiting_s,
                                                                                 before.client.waiting_s)),
                      broker_cpu_s=round(broker, 6), broker_wait_s=_round(broker_wait), busiest=busiest,
                      busiest_cpu_s=round(per_process.get(busiest, 0.0), 6), machine_busy_s=round(machine, 6),
                      others_cpu_s=round(max(0.0, machine - client - broker), 6), cores=cores(),
                      load_1m=round(os.getloadavg()[0], 2))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def per_message_us(fig: CpuFigures, seconds: float) -> float | None:
    """``seconds`` of CPU as µs per confirmed message."""
    return round(seconds / fig["messages"] * 1e6, 1) if fig["messages"] else None


def share(fig: CpuFigures, seconds: float) -> float | None:
    """``seconds`` of CPU as a share of one core over the publish (2.0: two cores busy throughout)."""
    return round(seconds / fig["wall_s"], 2) if fig["wall_s"] > 0 else None
