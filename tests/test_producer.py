"""billing-producer: rate, count, unique event ids, approximate MAXLEN, WAIT confirmations, the JSON log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis
from billing_support import ROOT, spawn, stop_process, wait_until


def run_producer(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "solutions.producer", *args], cwd=ROOT, capture_output=True,
                          timeout=60)


def records(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_count_log_and_unique_event_ids(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream, log = f"{key_prefix}orders", tmp_path / "sent.jsonl"
    done = run_producer("--redis-url", redis_url, "--stream", stream, "--rate", "0", "--count", "300",
                        "--log", str(log))
    assert done.returncode == 0, done.stderr.decode()
    sent = records(log)
    assert len(sent) == 300 and {r["status"] for r in sent} == {"confirmed"}
    entries = client.xrange(stream)
    assert [r["msg_id"] for r in sent] == [i for i, _ in entries]
    assert len({f["event_id"] for _, f in entries}) == 300
    _, first = entries[0]
    assert first["type"] == "order.paid" and float(first["amount"]) > 0 and first["order_id"]
    assert int(first["produced_at_ms"]) > 0
    assert all(isinstance(r["time"], float) for r in sent)


def test_maxlen_is_approximate(redis_url: str, key_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = f"{key_prefix}orders"
    done = run_producer("--redis-url", redis_url, "--stream", stream, "--rate", "0", "--count", "1000",
                        "--maxlen", "100")
    assert done.returncode == 0, done.stderr.decode()
    assert 100 <= client.xlen(stream) < 1000


def test_wait_without_enough_replicas_is_logged_as_unknown(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    stream, log = f"{key_prefix}orders", tmp_path / "sent.jsonl"
    done = run_producer("--redis-url", redis_url, "--stream", stream, "--rate", "0", "--count", "3",
                        "--wait-replicas", "1", "--wait-timeout-ms", "50", "--log", str(log))
    assert done.returncode == 0, done.stderr.decode()
    sent = records(log)
    assert [r["status"] for r in sent] == ["unknown"] * 3  # written on the master, not confirmed by a replica
    assert all(r["msg_id"] and r["replicas"] == 0 for r in sent)


def test_rate_and_sigint(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = f"{key_prefix}orders"
    proc = spawn("solutions.producer", "--redis-url", redis_url, "--stream", stream, "--rate", "50",
                 log_path=tmp_path / "producer.log")
    try:
        wait_until(lambda: client.xlen(stream) >= 1, 10, "the first event")
        start, started = client.xlen(stream), time.monotonic()
        time.sleep(1.0)
        rate = (client.xlen(stream) - start) / (time.monotonic() - started)
    finally:
        assert stop_process(proc, signal.SIGINT) == 0
    assert 30 <= rate <= 70, rate
    assert "producer done" in (tmp_path / "producer.log").read_text()


def test_unreachable_redis_is_logged_as_unknown_and_does_not_crash(tmp_path: Path) -> None:
    log = tmp_path / "sent.jsonl"
    done = run_producer("--redis-url", "redis://127.0.0.1:1/0", "--rate", "0", "--count", "2", "--log", str(log))
    assert done.returncode == 0, done.stderr.decode()
    assert [r["status"] for r in records(log)] == ["unknown", "unknown"]
    assert all(r["msg_id"] is None for r in records(log))
