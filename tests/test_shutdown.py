"""Graceful shutdown: SIGTERM stops reading, drains in-flight work, acks only what was charged, exit 0."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
import redis
from billing_support import charges, pending_ids, produce, reaped, spawn, stop_process, wait_until, worker_args


@pytest.mark.slow
def test_sigterm_with_work_in_flight_drains_and_acks_only_what_was_charged(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream, ledger, log = f"{key_prefix}orders", tmp_path / "ledger.sqlite3", tmp_path / "worker.log"
    ids = produce(client, stream, 200, orders=50)
    proc = spawn("solutions.billing", *worker_args(redis_url, stream, ledger, "w1", handler_delay_ms=400,
                                                    parallelism=8, count=16),
                 log_path=log)
    with reaped(proc):
        wait_until(lambda: len(charges(ledger)) >= 8, 15, "the first charges")
        in_hand = pending_ids(client, stream, "billing")
        assert in_hand, "the worker holds unacked messages when the signal comes"
        started = time.monotonic()
        assert stop_process(proc) == 0
        assert time.monotonic() - started < 10
    text = log.read_text()
    assert re.search(r"drain complete .*left_pending=0", text), text[-2000:]
    charged_msg_ids = {msg_id for _, _, msg_id, _ in charges(ledger)}
    still_pending = pending_ids(client, stream, "billing")
    acked = _delivered(client, stream, ids) - still_pending
    assert acked <= charged_msg_ids, "something was acked without being charged"
    assert in_hand <= charged_msg_ids, "the work in hand at SIGTERM was finished during the drain"
    assert len(charged_msg_ids) < len(ids), "the worker stopped reading new messages"


def _delivered(client: redis.Redis, stream: str, ids: list[str]) -> set[str]:
    """Ids the group has delivered: up to its last-delivered-id."""
    (info,) = client.xinfo_groups(stream)
    last = tuple(map(int, str(info["last-delivered-id"]).split("-")))
    return {i for i in ids if tuple(map(int, i.split("-"))) <= last}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_drain_deadline_leaves_work_pending_and_says_which(
    sig: int, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream, ledger, log = f"{key_prefix}orders", tmp_path / "ledger.sqlite3", tmp_path / "worker.log"
    ids = produce(client, stream, 3, orders=3)
    proc = spawn("solutions.billing", *worker_args(redis_url, stream, ledger, "slow", handler_delay_ms=20_000,
                                                    drain_timeout_s=0.5),
                 log_path=log)
    with reaped(proc):
        wait_until(lambda: len(pending_ids(client, stream, "billing")) == 3, 15, "three messages in hand")
        assert stop_process(proc, sig) == 0
    text = log.read_text()
    match = re.search(r"drain complete .*left_pending=3 ids=(\S+)", text)
    assert match, text[-2000:]
    assert set(match.group(1).split(",")) == set(ids)
    assert pending_ids(client, stream, "billing") == set(ids), "not acked: they stay in the PEL"
    assert charges(ledger) == []
