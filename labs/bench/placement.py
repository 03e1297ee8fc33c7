"""Where the client and the server run, and what one loopback round trip costs.

On a 2-vCPU machine a round-trip-bound figure changes by about 2x depending on whether the
client and ``redis-server`` share a core. The bench pins them (the server on one CPU, the
client on another when there are two) and prints the placement beside the table.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    cpus: int
    server_cpus: str
    client_cpus: str
    pinned_with: str
    ping_rtt_us: float

    def describe(self) -> str:
        return (
            f"{self.cpus} CPU(s); redis-server on CPU {self.server_cpus}, bench client on CPU {self.client_cpus} "
            f"({self.pinned_with}); loopback PING round trip {self.ping_rtt_us:.0f} µs (median)"
        )


def _set_affinity(pid: int, cpus: set[int]) -> str:
    """Pin ``pid`` with ``taskset`` when it exists, else with ``sched_setaffinity``."""
    cpu_list = ",".join(str(c) for c in sorted(cpus))
    if shutil.which("taskset"):
        subprocess.run(["taskset", "-a", "-p", "-c", cpu_list, str(pid)], capture_output=True, check=True)
        return "taskset"
    os.sched_setaffinity(pid, cpus)
    return "sched_setaffinity"


def pin(server_pid: int) -> tuple[str, str, str]:
    """Put the server on the last CPU and this process on the others; returns the placement."""
    if not hasattr(os, "sched_getaffinity"):
        return "any", "any", "not pinned (no affinity API on this platform)"
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        return str(available[0]), str(available[0]), "one CPU: client and server share it"
    server, client = {available[-1]}, set(available[:-1])
    how = _set_affinity(server_pid, server)
    _set_affinity(os.getpid(), client)
    return ",".join(map(str, sorted(server))), ",".join(map(str, sorted(client))), how


def _threads_to(cpus: set[int]) -> None:
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


@contextlib.contextmanager
def off_the_client_cpus() -> Iterator[None]:
    """Every thread of this process on the CPUs it is not pinned to (the server's, see :func:`pin`)
    while the block runs, then back. A process started *before* the block keeps the client
    CPUs: the bench starts the consumer it measures, then polls Redis and ``/proc`` from the
    server's CPU, so the instrument (and the progress bar's refresh thread) takes no CPU time
    from the consumer. On one CPU, or without the affinity API, nothing moves."""
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    mine = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - mine
    if not others:
        yield
        return
    _threads_to(others)
    try:
        yield
    finally:
        _threads_to(mine)


def ping_rtt_us(url: str, samples: int = 2000) -> float:
    """Median PING round trip in microseconds, measured from this process."""
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        client.ping()
        times = []
        for _ in range(samples):
            started = time.perf_counter_ns()
            client.ping()
            times.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(times)


def measure(url: str, server_pid: int | None) -> Placement:
    cpus = os.cpu_count() or 1
    if server_pid is None:
        server, client, how = "unknown", "any", "not pinned: the server is not ours"
    else:
        server, client, how = pin(server_pid)
    placement = Placement(cpus, server, client, how, ping_rtt_us(url))
    log.info("placement: %s", placement.describe())
    return placement
