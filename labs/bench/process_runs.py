"""The rows a user's figure comes from: consumers as processes of their own, counted by the server.

Each run pre-produces ``n`` events of one shape (:mod:`labs.bench.shapes`) into a stream, with
a consumer group at ``0`` for every consumer of the round, and then starts one consumer
process: the ``billing-worker`` CLI (``python -m solutions.billing``, as a user starts it) or
the raw ``redis.asyncio`` loop (:mod:`labs.bench.raw_consumer`). Neither reports its own
speed: the bench polls ``XINFO GROUPS`` and counts what Redis saw acknowledged
(``entries-read`` minus ``pending``), and the rate is taken over the middle 80 % of the
drain (from 10 % to 90 % acked), so start-up (imports, connecting, creating the ledger) and the
last stragglers are outside it. Processes inherit the bench's CPU pinning (the client CPU).

Over the same window the bench reads the consumer's CPU time (user + system, ``/proc/<pid>/stat``)
at every poll: the CPU it spent per message, and how busy it was (CPU time over wall time). A
process busy 87 % of the time at 5.7 µs a message is slowed by its own work; one busy 64 % waits
(for round trips, for fsyncs): the two need different fixes. The kernel counts CPU time in clock
ticks (10 ms here), so a window shorter than :data:`MIN_CPU_WINDOW_S` gives no CPU figure.

The poll itself (a round trip every :data:`POLL_S`, a read of ``/proc``) runs on the server's
CPU while the consumer runs (:func:`labs.bench.placement.off_the_client_cpus`): on the
consumer's CPU it took a few per cent of a CPU that a busy worker needs and a waiting raw
loop does not, which lowered the worker's ratio by about as much.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from labs.bench import placement
from labs.bench.shapes import SHAPES
from labs.experiments import ceiling
from labs.launcher.process import cpu_s
from labs.polling import wait_until

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.005
WINDOW = (0.1, 0.9)  # the middle 80 % of the drain
STOP_TIMEOUT_S = 30.0
MIN_CPU_WINDOW_S = 0.3  # at 10 ms a clock tick, a CPU figure within about 3 %
TUNED_FLAGS = ("--count", "100", "--parallelism", "100")  # the throughput flags (with --handler-delay-ms 0)


@dataclass(frozen=True)
class Consumer:
    """One kind of consumer process: ``dedupe`` None is the raw loop."""

    label: str
    dedupe: str | None = None
    flags: tuple[str, ...] = ()

    def argv(self, url: str, stream: str, group: str, ledger: Path, n: int) -> list[str]:
        if self.dedupe is None:
            return [sys.executable, "-m", "labs.bench.raw_consumer", url, stream, group, str(n), *self.flags]
        return [
            sys.executable, "-m", "solutions.billing", "--redis-url", url, "--stream", stream, "--group", group,
            "--consumer", f"bench-{group}", "--dedupe", self.dedupe, "--ledger", str(ledger),
            "--handler-delay-ms", "0", "--metrics-interval-s", "3600", "--block-ms", "500", *self.flags,
        ]


RAW = Consumer("raw redis.asyncio process, COUNT 100, one XACK per batch")


def worker(dedupe: str, flags: Sequence[str] = TUNED_FLAGS) -> Consumer:
    words = " ".join(flags) if flags else "defaults (--count 16 --parallelism 8)"
    return Consumer(f"billing-worker process, --dedupe {dedupe}, {words}, --handler-delay-ms 0", dedupe, tuple(flags))


def produce(url: str, stream: str, n: int, shape: str, groups: Sequence[str]) -> None:
    """``n`` events of ``shape`` into a fresh ``stream`` (pipelined), and each group at ``0``."""
    ceiling.produce(url, stream, n, *groups, fields=SHAPES[shape])


def acked(client: redis.Redis, stream: str, group: str) -> int:
    """What Redis saw acknowledged in ``group``: entries read minus entries still pending."""
    for info in client.xinfo_groups(stream):
        if info["name"] in (group, group.encode()):
            return int(info["entries-read"] or 0) - int(info["pending"])
    raise RuntimeError(f"no group {group!r} on {stream!r}")


Sample = tuple[float, int, float | None]  # (perf_counter s, acked, the consumer's CPU s or None)


@dataclass(frozen=True)
class Drain:
    """One run over :data:`WINDOW`: its rate and, where the kernel's count allows, its CPU."""

    rate: float  # msgs/s
    cpu_us: float | None = None  # the consumer's CPU time per message, µs

    @property
    def busy(self) -> float | None:
        """Its CPU time over the window's wall time (1.0: it never waited)."""
        return None if self.cpu_us is None else self.cpu_us * self.rate / 1e6


def drain_of(samples: Sequence[Sample], n: int) -> Drain:
    """Messages per second between the moments :data:`WINDOW`'s fractions of ``n`` were acked
    (each moment interpolated between the two polls around it), and the consumer's CPU over the
    same window (interpolated the same way) when the samples around both moments have it and the
    window is at least :data:`MIN_CPU_WINDOW_S`."""
    (lo, cpu_lo), (hi, cpu_hi) = (_crossing(samples, fraction * n) for fraction in WINDOW)
    if hi <= lo:
        raise RuntimeError(f"no time between {WINDOW[0]:.0%} and {WINDOW[1]:.0%} acked: poll faster")
    messages = (WINDOW[1] - WINDOW[0]) * n
    if cpu_lo is None or cpu_hi is None or hi - lo < MIN_CPU_WINDOW_S:
        return Drain(messages / (hi - lo))
    return Drain(messages / (hi - lo), max(0.0, cpu_hi - cpu_lo) / messages * 1e6)


def _crossing(samples: Sequence[Sample], level: float) -> tuple[float, float | None]:
    """When the acks crossed ``level``, and the consumer's CPU seconds then (None if unknown)."""
    for (t0, a0, c0), (t1, a1, c1) in itertools.pairwise(samples):
        if a0 < level <= a1:
            share = (level - a0) / (a1 - a0)
            cpu = None if c0 is None or c1 is None else c0 + (c1 - c0) * share
            return t0 + (t1 - t0) * share, cpu
    raise RuntimeError(f"the acks never crossed {level:.0f}")


def run(consumer: Consumer, url: str, stream: str, group: str, n: int, workdir: Path,
        timeout_s: float = 600.0, tree: Path = ROOT) -> Drain:
    """Start ``consumer`` on ``group`` (pre-produced), poll its acks until all ``n``, stop it;
    returns its rate (msgs/s) and CPU over the middle of the drain.

    The process runs in ``tree`` (a checkout; this one by default), so ``python -m`` imports that
    tree's ``solutions`` and ``labs``: :mod:`labs.bench.ab` measures another commit's worker so."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{group}.log"
    argv = consumer.argv(url, stream, group, workdir / f"{group}.sqlite3", n)
    with redis.Redis.from_url(url) as client, log_path.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=tree, stdout=subprocess.DEVNULL, stderr=out)
        try:
            with placement.off_the_client_cpus():  # the poll must not share the consumer's CPU
                samples = _poll(client, proc, consumer.label, stream, group, n, timeout_s, log_path)
        finally:
            _stop(proc)
    return drain_of(samples, n)


def _poll(client: redis.Redis, proc: subprocess.Popen[bytes], label: str, stream: str, group: str, n: int,
          timeout_s: float, log_path: Path) -> list[Sample]:
    samples: list[Sample] = [(time.perf_counter(), acked(client, stream, group), cpu_s(proc.pid))]

    def all_acked() -> bool:
        if samples[-1][1] >= n:
            return True
        if proc.poll() is not None and acked(client, stream, group) < n:
            tail = log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{label} exited ({proc.returncode}) after {samples[-1][1]} of {n}:\n{tail}")
        return False

    def sample() -> bool:
        samples.append((time.perf_counter(), acked(client, stream, group), cpu_s(proc.pid)))
        return all_acked()

    if not all_acked():
        wait_until(sample, timeout_s, lambda: f"{label}: {n} acked ({samples[-1][1]} were)", POLL_S,
                   error=RuntimeError)
    return samples


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop within %.0f s of SIGTERM: killed", proc.args, STOP_TIMEOUT_S)
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
