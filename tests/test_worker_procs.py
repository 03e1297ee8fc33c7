"""Worker and producer subprocesses, the ledger and the PEL as the drain experiments read them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import redis

from labs.experiments.worker_procs import (
    WorkerProcess,
    charges,
    delivered_ids,
    flags,
    pending_ids,
    produce_backlog,
    start_producer,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)


def test_flags_and_wait_until() -> None:
    assert flags(handler_delay_ms=5, stream="s") == ["--handler-delay-ms", "5", "--stream", "s"]
    assert wait_until(lambda: 7, 1, "a value") == 7
    with pytest.raises(TimeoutError, match="never"):
        wait_until(lambda: 0, 0.1, "never")
    with pytest.raises(TimeoutError):
        wait_until(lambda: 1 // 0, 0.1, "a division", ignoring=(ZeroDivisionError,))
    assert charges(Path("/nonexistent/ledger.sqlite3")) == []


def test_worker_and_producer_charge_everything(redis_client: redis.Redis, redis_url: str, key_prefix: str,
                                               tmp_path: Path) -> None:
    stream, ledger = f"{key_prefix}orders", tmp_path / "ledger.sqlite3"
    assert pending_ids(redis_client, stream) == set()  # no group yet
    backlog = produce_backlog(redis_client, stream, 20)
    producer = start_producer(redis_url, stream, tmp_path, rate=0, count=10)
    worker = WorkerProcess.start(redis_url, stream, ledger, "w-test", tmp_path)
    try:
        assert producer.wait(30) == 0
        wait_until(lambda: worker.alive() and len(charges(ledger)) == 30, 30, "30 charges")
        assert worker.stop(signal.SIGTERM) == 0
    finally:
        worker.kill()
    assert set(backlog) <= delivered_ids(redis_client, stream)
    assert len(delivered_ids(redis_client, stream)) == 30 and pending_ids(redis_client, stream) == set()
    assert {c.consumer for c in charges(ledger)} == {"w-test"}
    assert all(0 <= c.lag_s < 30 for c in charges(ledger))  # charged after it was written
    assert "drain complete" in worker.log_text()
    with pytest.raises(RuntimeError, match="exited with 0"):
        worker.alive()
