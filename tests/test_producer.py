"""billing-producer: rate, count, unique event ids, approximate MAXLEN, WAIT confirmations, re-sends, the JSON log."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from billing_support import ROOT, spawn, stop_process, wait_until
from redis.exceptions import ConnectionError as RedisConnectionError

from labs.launcher.ports import free_port
from labs.launcher.topology import Topology
from solutions.producer import UNKNOWN, ProducerOptions, Sender


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
    assert {r["attempt"] for r in sent} == {1} and {r["error"] for r in sent} == {None}
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


def test_wait_without_enough_replicas_is_logged_as_unknown_and_exits_1(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    stream, log = f"{key_prefix}orders", tmp_path / "sent.jsonl"
    done = run_producer("--redis-url", redis_url, "--stream", stream, "--rate", "0", "--count", "3",
                        "--wait-replicas", "1", "--wait-timeout-ms", "50", "--log", str(log))
    sent = records(log)
    assert [r["status"] for r in sent] == ["unknown"] * 3  # written on the master, not confirmed by a replica
    assert all(r["msg_id"] and r["replicas"] == 0 for r in sent)
    assert done.returncode == 1  # nothing was confirmed: a script must not read this as success
    assert done.stderr.decode().strip().splitlines()[-1].endswith("none of the 3 sends was confirmed (see the "
                                                                   "warnings above, or --log)")


RATE, SENDS = 40.0, 81  # a 2 s schedule


def test_rate_follows_the_schedule(redis_url: str, key_prefix: str) -> None:
    """The producer sends the k-th event no earlier than k / rate after the start, and catches up when late.

    So the span of the stream ids (Redis's clock at each XADD) is at least the schedule's
    2 s minus the first send's latency (a connection is made before the schedule starts),
    however fast the machine; and a loaded machine delays it only by its stalls, not by the
    number of sends. The window is the whole run, so a scheduling hiccup of a few hundred ms
    does not move the result much.
    """
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = f"{key_prefix}orders"
    done = run_producer("--redis-url", redis_url, "--stream", stream, "--rate", str(RATE), "--count", str(SENDS))
    assert done.returncode == 0, done.stderr.decode()
    stamps_ms = [int(msg_id.split("-")[0]) for msg_id, _ in client.xrange(stream)]
    assert len(stamps_ms) == SENDS
    schedule_s = (SENDS - 1) / RATE
    span_s = (stamps_ms[-1] - stamps_ms[0]) / 1000
    assert span_s >= schedule_s - 0.25, f"{SENDS} sends in {span_s:.2f}s: faster than {RATE}/s"
    assert span_s <= schedule_s + 5.0, f"{SENDS} sends in {span_s:.2f}s: far behind the {schedule_s:.1f}s schedule"
    halfway = stamps_ms[SENDS // 2] - stamps_ms[0]
    assert halfway / 1000 >= (SENDS // 2) / RATE - 0.25, "a burst: the first half went faster than the rate"


def test_sigint_stops_the_producer_with_exit_0(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = f"{key_prefix}orders"
    proc = spawn("solutions.producer", "--redis-url", redis_url, "--stream", stream, "--rate", "50",
                 log_path=tmp_path / "producer.log")
    try:
        wait_until(lambda: client.xlen(stream) >= 5, 10, "the first events")
    finally:
        assert stop_process(proc, signal.SIGINT) == 0
    assert "producer done" in (tmp_path / "producer.log").read_text()


def test_unreachable_redis_is_logged_as_unknown_and_exits_1_with_one_line(tmp_path: Path) -> None:
    log = tmp_path / "sent.jsonl"
    done = run_producer("--redis-url", f"redis://127.0.0.1:{free_port()}/0", "--rate", "0", "--count", "4",
                        "--log", str(log))
    assert done.returncode == 1
    assert [r["status"] for r in records(log)] == ["unknown"] * 4
    assert all(r["msg_id"] is None for r in records(log))
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr
    assert len([ln for ln in stderr.splitlines() if "WARNING" in ln]) == 1, stderr  # one line for the streak
    assert "XADD failed, retrying with backoff: ConnectionError" in stderr


def test_bad_url_and_help() -> None:
    done = run_producer("--redis-url", "notaurl")
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == [
        "billing-producer: error: argument --redis-url: 'notaurl' is not a Redis URL (expected "
        "redis://HOST:PORT/DB, rediss://... or unix:///path) (see billing-producer --help)"
    ]
    text = " ".join(run_producer("--help").stdout.decode().split())
    assert "(default: None)" not in text and "(default: until SIGINT)" in text
    assert not re.search(r"\(default: [^)]*\) \(default:", text)


def test_resend_repeats_an_unknown_send_with_the_same_event_id(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    """WAIT 1 on a server without replicas: every attempt is written but unconfirmed, so it is re-sent,
    and the stream ends up holding each event three times: the duplicates a consumer must absorb."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream, log = f"{key_prefix}orders", tmp_path / "sent.jsonl"
    done = run_producer("--redis-url", redis_url, "--stream", stream, "--rate", "0", "--count", "2",
                        "--wait-replicas", "1", "--wait-timeout-ms", "20", "--resend", "2", "--log", str(log))
    assert done.returncode == 1
    sent = records(log)
    assert [r["attempt"] for r in sent] == [1, 2, 3, 1, 2, 3]
    assert [r["event_id"] for r in sent][:3] == [sent[0]["event_id"]] * 3 != [r["event_id"] for r in sent][3:]
    assert {r["status"] for r in sent} == {"unknown"}
    assert {r["error"] for r in sent} == {"WAIT: 0 of 1 replicas acked"}
    in_stream = Counter(f["event_id"] for _, f in client.xrange(stream))
    assert sorted(in_stream.values()) == [3, 3]  # each attempt was written: an unknown is not a refusal
    assert [r["msg_id"] for r in sent] == [i for i, _ in client.xrange(stream)]
    assert "attempted=2 confirmed=0 unknown=2 refused=0 resent=4" in done.stderr.decode()


def test_resend_stops_at_the_first_confirmed_attempt_after_a_refusal(
    topology_factory: Callable[..., Topology], tmp_path: Path
) -> None:
    """OOM refuses the XADD (refused: known not written, safe to re-send); once memory is back the
    next re-send is confirmed, and the event is in the stream exactly once."""
    topo = topology_factory("single")
    client = redis.Redis.from_url(topo.url, decode_responses=True)
    client.config_set("maxmemory", 1)  # below used_memory: every denyoom command (XADD) is refused
    log = tmp_path / "sent.jsonl"
    proc = spawn("solutions.producer", "--redis-url", topo.url, "--stream", "orders", "--rate", "0", "--count", "1",
                 "--resend", "50", "--log", str(log), log_path=tmp_path / "producer.log")
    try:
        wait_until(lambda: log.exists() and len(records(log)) >= 2, 20, "two refused attempts")
        client.config_set("maxmemory", 0)
        assert proc.wait(30) == 0
    finally:
        stop_process(proc)
    sent = records(log)
    assert {r["event_id"] for r in sent} == {sent[0]["event_id"]}
    assert [r["status"] for r in sent[:-1]] == ["refused"] * (len(sent) - 1) and sent[-1]["status"] == "confirmed"
    assert sent[0]["error"].startswith("OutOfMemoryError: ") and sent[0]["msg_id"] is None
    assert [r["attempt"] for r in sent] == list(range(1, len(sent) + 1))
    assert [f["event_id"] for _, f in client.xrange("orders")] == [sent[0]["event_id"]]


def test_a_lost_connection_is_unknown_but_a_bug_is_not_swallowed() -> None:
    """attempt() counts Redis and network errors as an unknown outcome; anything else is a bug and raises."""

    class Pipe:
        def __init__(self, error: Exception) -> None:
            self.error = error

        async def __aenter__(self) -> Pipe:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        def xadd(self, *args: object, **kwargs: object) -> None:
            return None

        async def execute(self, raise_on_error: bool = True) -> list[object]:
            raise self.error

    class Client:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def pipeline(self, transaction: bool = True) -> Pipe:
            return Pipe(self.error)

    options = ProducerOptions(count=1)
    lost = Sender(Client(RedisConnectionError("Connection reset by peer")), options, None)  # type: ignore[arg-type]  # a fake
    assert asyncio.run(lost.attempt({"event_id": "e-1"})).status == UNKNOWN
    buggy = Sender(Client(TypeError("a bug")), options, None)  # type: ignore[arg-type]  # a fake client
    with pytest.raises(TypeError, match="a bug"):
        asyncio.run(buggy.attempt({"event_id": "e-2"}))
