"""labs.experiments.fast_consumer: what notebook 07's section 6 shows, checked on real Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labs.experiments.fast_consumer import batch_run, cpu_per_message, raw_and_dict

pytestmark = pytest.mark.timeout(90)


def test_an_entry_comes_as_redis_keeps_it(redis_url: str, key_prefix: str) -> None:
    (_, fields), as_dict = asyncio.run(raw_and_dict(redis_url, f"{key_prefix}raw"))
    assert list(fields or []) == [b"order_id", b"o-1", b"amount", b"1.50", b"note", b"a", b"note", b"b"]
    assert as_dict == {b"order_id": b"o-1", b"amount": b"1.50", b"note": b"b"}  # the dict lost a value


def test_a_batch_is_one_handler_call_one_xack_and_every_event_is_charged_once(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    run = asyncio.run(batch_run(redis_url, f"{key_prefix}batch", tmp_path / "l.sqlite3", n=1000, count=50))
    assert run.charged == run.handled_in_runs == run.events == 1000
    assert run.handler_runs <= run.reads and run.handler_runs >= 1000 // 50  # a call per read batch, not per message
    assert (run.charge_runs, run.charged_in_runs) == (run.handler_runs, 1000)  # the charges too: one call a run
    assert run.xacks <= run.xreadgroups == run.reads  # at most one XACK per read batch


def test_cpu_per_message_is_measured_for_both(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    cpu = asyncio.run(cpu_per_message(redis_url, f"{key_prefix}cpu", tmp_path / "l.sqlite3", n=500))
    assert cpu.ceiling_us > 0 and cpu.worker_us > 0  # a measurement: no claim about which is faster
