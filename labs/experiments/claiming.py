"""Too small a min idle: the rescuer takes entries from a live, busy consumer (double processing).

:func:`double_processing_run` is one measured run: a consumer reads ``entries`` entries in
one ``XREADGROUP`` and handles them with ``parallelism`` threads (1: one after another, as a
plain read loop does), each handling taking ``work_ms`` plus a seeded random extra up to
``jitter_ms``, then ``XACK``; meanwhile a rescuer runs ``XAUTOCLAIM`` (cursor kept, pages
followed) every ``claim_every_ms`` with ``min_idle_ms``, "handles" what it took at once and
acks. Redis knows only how long an entry has been idle, not whether its owner is alive, so
an entry whose handling lasts longer than ``min_idle_ms`` is handled twice. The run counts
the handlings per entry; ``duplicates`` is handlings minus distinct entries.

:func:`min_idle_sweep` repeats the run for several min idle values with every entry in hand
at once (``parallelism = entries``), so an entry's idle time is its handler's duration and
the duplicates can be read against the handler's measured p99.

Notebook 02 (a sequential batch) and notebook 06 (the sweep) call these; tests in
``tests/test_claiming.py``.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import redis

from labs import replies

GROUP = "billing"
# Redis counts an entry's idle time from its delivery to its XACK; the consumer sees the same
# span from the XREADGROUP reply to the XACK reply (``held_max_ms``), give or take a round trip.
# A min idle this much above the longest such span leaves nothing for the rescuer to take.
IDLE_MARGIN_MS = 20


@dataclass(frozen=True)
class ClaimRun:
    """One run's numbers (see the module docstring)."""

    min_idle_ms: int
    entries: int
    processed_once_or_more: int
    processings: int
    duplicates: int
    acks_that_found_nothing: int  # the owner's XACK returned 0: the rescuer had acked first
    pending_left: int
    handler_p50_ms: float
    handler_p99_ms: float
    held_max_ms: float  # the longest time an entry was in hand: from the read to its XACK
    elapsed_s: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by the nearest-rank method; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def work_durations_ms(entries: int, work_ms: int, jitter_ms: int, seed: int) -> list[float]:
    """Each entry's handling time: ``work_ms`` plus a uniform extra up to ``jitter_ms`` (seeded)."""
    rng = random.Random(seed)
    return [work_ms + (rng.uniform(0, jitter_ms) if jitter_ms else 0.0) for _ in range(entries)]


def double_processing_run(
    redis_url: str,
    stream: str,
    *,
    min_idle_ms: int,
    entries: int = 20,
    work_ms: int = 50,
    jitter_ms: int = 0,
    parallelism: int = 1,
    claim_every_ms: int = 20,
    seed: int = 0,
    timeout_s: float = 30.0,
) -> ClaimRun:
    """One consumer plus one ``XAUTOCLAIM`` rescuer on a fresh ``stream``; count the double handlings."""
    if entries < 1 or parallelism < 1:
        raise ValueError("entries and parallelism must be >= 1")
    with contextlib.closing(redis.Redis.from_url(redis_url, decode_responses=True)) as client:
        client.delete(stream)
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        for i in range(entries):
            client.xadd(stream, {"order_id": f"o-{i}"})
        durations = work_durations_ms(entries, work_ms, jitter_ms, seed)
        run = _Run(redis_url, stream, min_idle_ms, claim_every_ms)
        started = time.monotonic()
        rescuer = threading.Thread(target=run.rescue, name="rescuer", daemon=True)
        rescuer.start()
        try:
            run.consume(durations, parallelism, timeout_s)
        finally:
            run.done.set()
            rescuer.join(timeout=5)
        elapsed_s = time.monotonic() - started
        handled = Counter(run.processings)
        return ClaimRun(
            min_idle_ms=min_idle_ms,
            entries=entries,
            processed_once_or_more=len(handled),
            processings=sum(handled.values()),
            duplicates=sum(handled.values()) - len(handled),
            acks_that_found_nothing=len(run.lost_acks),
            pending_left=int(client.xpending(stream, GROUP)["pending"]),
            handler_p50_ms=percentile(run.handled_ms, 50),
            handler_p99_ms=percentile(run.handled_ms, 99),
            held_max_ms=max(run.held_ms, default=0.0),
            elapsed_s=elapsed_s,
        )


class _Run:
    """The shared state of one run; threads only append to lists (atomic in CPython)."""

    def __init__(self, redis_url: str, stream: str, min_idle_ms: int, claim_every_ms: int):
        self.redis_url = redis_url
        self.stream = stream
        self.min_idle_ms = min_idle_ms
        self.claim_every_s = claim_every_ms / 1000
        self.done = threading.Event()
        self.processings: list[str] = []
        self.lost_acks: list[str] = []
        self.handled_ms: list[float] = []
        self.held_ms: list[float] = []

    def consume(self, durations_ms: list[float], parallelism: int, timeout_s: float) -> None:
        """``XREADGROUP`` every entry at once, handle them with ``parallelism`` threads, ``XACK`` each."""
        with contextlib.closing(redis.Redis.from_url(self.redis_url, decode_responses=True)) as client:
            reply = replies.read(client.xreadgroup(GROUP, "worker", {self.stream: ">"}, count=len(durations_ms)))
            ids: list[str] = [msg_id for msg_id, _fields in reply[0][1]]
            read_at = time.monotonic()
            with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="handler") as pool:
                futures = [
                    pool.submit(self._handle, client, msg_id, duration, read_at)
                    for msg_id, duration in zip(ids, durations_ms, strict=True)
                ]
                for future in futures:
                    future.result(timeout=timeout_s)

    def _handle(self, client: redis.Redis, msg_id: str, duration_ms: float, read_at: float) -> None:
        started = time.monotonic()
        time.sleep(duration_ms / 1000)  # the work
        self.processings.append(msg_id)
        self.handled_ms.append((time.monotonic() - started) * 1000)
        acked = client.xack(self.stream, GROUP, msg_id)
        self.held_ms.append((time.monotonic() - read_at) * 1000)  # waiting for a thread, the work, the XACK
        if acked == 0:
            self.lost_acks.append(msg_id)

    def rescue(self) -> None:
        """Every ``claim_every_ms``: ``XAUTOCLAIM`` page by page (the cursor kept), handle, ``XACK``."""
        with contextlib.closing(redis.Redis.from_url(self.redis_url, decode_responses=True)) as client:
            cursor = "0-0"
            while not self.done.is_set():
                cursor, claimed, _deleted = client.xautoclaim(
                    self.stream, GROUP, "rescuer", min_idle_time=self.min_idle_ms, start_id=cursor, count=100
                )
                for msg_id, _fields in claimed:
                    self.processings.append(msg_id)  # handled again at once ...
                    client.xack(self.stream, GROUP, msg_id)  # ... and acked
                if cursor == "0-0":
                    self.done.wait(self.claim_every_s)


def min_idle_sweep(
    redis_url: str,
    stream_prefix: str,
    min_idle_values_ms: Sequence[int],
    *,
    entries: int = 40,
    work_ms: int = 40,
    jitter_ms: int = 60,
    seed: int = 7,
) -> list[ClaimRun]:
    """:func:`double_processing_run` per min idle, every entry in hand at once (same seed: same work)."""
    runs = []
    for min_idle_ms in min_idle_values_ms:
        stream = f"{stream_prefix}sweep:{min_idle_ms}"
        runs.append(
            double_processing_run(
                redis_url,
                stream,
                min_idle_ms=min_idle_ms,
                entries=entries,
                work_ms=work_ms,
                jitter_ms=jitter_ms,
                parallelism=entries,
                claim_every_ms=10,
                seed=seed,
            )
        )
    return runs
