"""Resident memory of this process, sampled while a long worker run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys
from pathlib import Path


def rss_mb() -> float:
    """Current resident set size in MB (/proc on Linux, else the peak so far)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return peak_rss_mb()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


async def sample_rss(samples: list[float], stop: asyncio.Event, every_s: float = 0.25) -> None:
    while not stop.is_set():
        samples.append(rss_mb())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


def growth(samples: list[float]) -> float:
    """RSS at the end over RSS after the first fifth of the run (1.0 means flat)."""
    if len(samples) < 5:
        return 1.0
    warm = max(samples[: max(1, len(samples) // 5)])
    return max(samples[-max(1, len(samples) // 5) :]) / warm
