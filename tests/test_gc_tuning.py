"""The GC settings billing-worker starts with, and the claim behind them: no cycles per message."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from labs.experiments import ceiling, worker_runs
from solutions.gc_tuning import GEN0_THRESHOLD, tune_for_throughput


@pytest.fixture
def gc_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.enable()


@pytest.mark.usefixtures("gc_restored")
def test_tuning_freezes_start_up_objects_and_raises_only_the_first_threshold() -> None:
    _, gen1, gen2 = gc.get_threshold()
    tune_for_throughput()
    assert gc.get_threshold() == (GEN0_THRESHOLD, gen1, gen2)
    assert gc.get_freeze_count() > 1000  # the modules and objects made at start-up


def _cyclic_garbage_after(redis_url: str, tmp_path: Path, key_prefix: str, n: int) -> int:
    stream = f"{key_prefix}gc{n}"
    ceiling.produce(redis_url, stream, n)
    settings = replace(
        worker_runs.bench_settings(
            redis_url, dedupe="sqlite", ledger=tmp_path / f"ledger-{n}.db", parallelism=100, count=100
        ),
        stream=stream,
    )
    gc.collect()
    gc.disable()
    try:
        asyncio.run(worker_runs.run_worker(settings, n, timeout_s=60))
        return gc.collect()
    finally:
        gc.enable()


@pytest.mark.usefixtures("gc_restored")
def test_the_per_message_path_makes_no_reference_cycles(redis_url: str, tmp_path: Path, key_prefix: str) -> None:
    """Why a rare first-generation collection costs nothing: a run of 3000 messages leaves as much
    cyclic garbage as a run of 300 (start-up and shutdown make some; the messages make none)."""
    few = _cyclic_garbage_after(redis_url, tmp_path, key_prefix, 300)
    many = _cyclic_garbage_after(redis_url, tmp_path, key_prefix, 3000)
    print(f"cyclic garbage: {few} after 300 messages, {many} after 3000")
    assert many - few < 2700 / 20, (few, many)  # fewer than one cycle per 20 extra messages
