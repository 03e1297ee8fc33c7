"""The consume figures: the worker against the ceiling, run by run, in msgs/s and in CPU per message.

Each worker run is paired with a ceiling run made just before it, on the same server, in the
same process pinned to the same CPU, and divided by it: this machine's speed drifts by ±20%
within a minute (a shared VM), and a ratio of two runs seconds apart cancels most of that
drift, where a ratio of two medians taken across a minute does not. A row's ratio is the median
of its paired ratios, with their quartiles beside it.

Two measures per run:

- **throughput** (msgs/s, wall clock): what the targets are about;
- **CPU per message** (µs, ``time.process_time`` of this process, every thread, over the run):
  what the client spends, waiting excluded. Other programs on the machine change it much less
  than the wall clock, so its paired ratio (the ceiling's CPU per message over the worker's)
  says whether a miss came from the code or from the machine.

Both GC modes run in every round: the settings ``billing-worker`` starts with
(:func:`solutions.gc_tuning.tune_for_throughput`) for every strategy, and CPython's defaults
for ``none`` and ``sqlite``, the two the targets name; the ceiling gets the same mode as the
worker it is paired with.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from labs.bench.results import DIAGNOSIS, DIAGNOSIS_CPU, Row
from solutions.gc_tuning import tune_for_throughput

DEDUPES = ("none", "redis", "sqlite")
DEFAULT_GC_DEDUPES = ("none", "sqlite")
# Issue 20's targets for none and sqlite; issue 8's floor for redis, which has no target of its own.
RATIO_TARGETS = {"none": 0.8, "redis": 0.3, "sqlite": 0.6}
GC_MODES = ("tuned", "default")
GC_WORDS = {"tuned": "", "default": ", CPython's default GC"}
CEILING = "ceiling: raw redis.asyncio, COUNT 100, one XACK per batch"
ROUND = [(d, "tuned") for d in DEDUPES] + [(d, "default") for d in DEFAULT_GC_DEDUPES]  # (dedupe, GC mode)
_CPYTHON_THRESHOLDS = (700, 10, 10)  # gc.get_threshold() of a fresh interpreter


@contextmanager
def gc_mode(mode: str) -> Iterator[None]:
    """Run the block with ``billing-worker``'s GC settings (``tuned``) or CPython's (``default``),
    then leave the tuned ones (what the rest of the bench runs with)."""
    if mode == "default":
        gc.unfreeze()
        gc.set_threshold(*_CPYTHON_THRESHOLDS)
    else:
        tune_for_throughput()
    try:
        yield
    finally:
        if mode == "default":
            tune_for_throughput()


@dataclass(frozen=True)
class Run:
    """One timed run: messages per second (wall clock) and CPU microseconds per message."""

    rate: float
    cpu_us: float


async def timed(run: Awaitable[float], n: int) -> Run:
    """Await ``run`` (it returns msgs/s) and measure this process's CPU time over it."""
    started = time.process_time()
    rate = await run
    return Run(rate, (time.process_time() - started) / n * 1e6)


@dataclass
class Pairs:
    """The paired runs of one worker row: each worker run with the ceiling run made just before it."""

    workers: list[Run] = field(default_factory=list)
    ceilings: list[Run] = field(default_factory=list)


def rows_of(pairs: dict[tuple[str, str], Pairs]) -> list[Row]:
    """The table's consume rows: per GC mode the ceiling, then each worker, in msgs/s; then the
    same in CPU per message, where the ratio is the ceiling's CPU per message over the worker's."""
    out: list[Row] = []
    for unit, section, suffix in (("msgs/s", DIAGNOSIS, ""), ("µs", DIAGNOSIS_CPU, ", CPU per message")):
        for mode in GC_MODES:
            keyed = {dedupe: p for (dedupe, m), p in pairs.items() if m == mode}
            if keyed:
                ceilings = [_value(run, unit) for p in keyed.values() for run in p.ceilings]
                out.append(Row(section, f"{CEILING}{GC_WORDS[mode]}{suffix}", unit, ceilings))
                for dedupe, p in keyed.items():
                    out.append(_worker_row(section, f"--dedupe {dedupe}{GC_WORDS[mode]}{suffix}", dedupe, p, unit))
    return out


def _value(run: Run, unit: str) -> float:
    return run.rate if unit == "msgs/s" else run.cpu_us


def _worker_row(section: str, what: str, dedupe: str, p: Pairs, unit: str) -> Row:
    row = Row(section, f"reference worker, {what}", unit, [_value(run, unit) for run in p.workers])
    if unit == "msgs/s":
        row.ratios = [w.rate / c.rate for w, c in zip(p.workers, p.ceilings, strict=True)]
        row.ratio_of = "ceiling (paired)"
        row.target = f"≥ {RATIO_TARGETS[dedupe]}× ceiling"
    else:  # the ceiling's cost over ours: the fraction of the ceiling's speed our CPU cost allows
        row.ratios = [c.cpu_us / w.cpu_us for w, c in zip(p.workers, p.ceilings, strict=True)]
        row.ratio_of = "ceiling's CPU/msg ÷ ours"
    row.ratio = statistics.median(row.ratios)
    if row.target:
        row.met = row.ratio >= RATIO_TARGETS[dedupe]
    return row
