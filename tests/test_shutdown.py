"""Graceful shutdown: SIGTERM stops reading, drains in-flight work, acks only what was charged, exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import time
from pathlib import Path

import pytest
import redis
from billing_support import (
    charges,
    hold_ledger_lock,
    pending_ids,
    produce,
    reaped,
    release_ledger_lock,
    settings,
    spawn,
    stop_process,
    until,
    wait_until,
    worker_args,
)

from labs.polling import every
from solutions.ledger import Ledger
from solutions.worker import Worker


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
    drained = re.search(r"drain complete .*left_pending=(\d+)", text)
    assert drained, text[-2000:]
    charged_msg_ids = {msg_id for _, _, msg_id, _ in charges(ledger)}
    still_pending = pending_ids(client, stream, "billing")
    acked = _delivered(client, stream, ids) - still_pending
    assert acked <= charged_msg_ids, "something was acked without being charged"
    assert in_hand <= charged_msg_ids, "the work in hand at SIGTERM was finished during the drain"
    assert len(charged_msg_ids) < len(ids), "the worker stopped reading new messages"
    # What it says it left is what Redis holds for it: a read in flight at the signal is cancelled after Redis
    # delivered its batch (seen under load: 16), and those entries, never worked on, wait for the rescuer.
    assert int(drained[1]) == len(still_pending), (drained[0][-300:], len(still_pending))
    assert still_pending.isdisjoint(charged_msg_ids), "a charged message was left unacked"


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


def test_the_signal_handler_drains_in_process(
    redis_url: str, key_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's own signal handler, called directly (as arq's tests do): it stops reading,
    finishes the work in hand, acks it, and logs one ``drain complete``."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", handler_delay_ms=300, parallelism=4, count=4)
    produce(client, s.stream, 40, orders=40)
    caplog.set_level(logging.INFO, logger="solutions.worker")

    async def scenario() -> tuple[set[str], list[str], int]:
        worker = Worker(s)
        task = asyncio.create_task(worker.run(handle_signals=True))
        # The pool past its read limit (parallelism + count): the reader waits for room, no read is in flight.
        await until(lambda: len(worker.pool) > s.parallelism + s.count, 10, "the pool full")
        in_hand = set(worker.pool.in_flight)
        worker._on_signal(signal.SIGTERM)
        summary = await asyncio.wait_for(task, s.drain_timeout_s + 10)
        return in_hand, summary.left_pending, summary.counts.processed

    in_hand, left, processed = asyncio.run(scenario())
    charged = {msg_id for _, _, msg_id, _ in charges(s.ledger)}
    assert in_hand <= charged, "the work in hand at the signal was finished"
    assert processed == len(charged) < 40, "the worker stopped reading new messages"
    # What it says it left is what Redis holds for it, and none of it was charged. On a starved machine the
    # handlers can free room before the signal is handled, and a read in flight then is cancelled after
    # Redis delivered its batch: those entries stay pending for the rescuer (the SIGTERM test above).
    assert set(left) == pending_ids(client, s.stream, s.group), left
    assert not set(left) & charged, "a charged message was left unacked"
    messages = [r.getMessage() for r in caplog.records if r.name == "solutions.worker"]
    assert sum("received SIGTERM" in m for m in messages) == 1, messages
    assert sum("drain complete" in m for m in messages) == 1, messages


class ChargesAtDrainComplete(logging.Handler):
    """Counts the ledger's charges at the moment the worker logs ``drain complete``."""

    def __init__(self, ledger: Path) -> None:
        super().__init__()
        self.ledger = ledger
        self.charged: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "drain complete" in record.getMessage():
            self.charged.append(len(charges(self.ledger)))


def test_drain_waits_for_a_commit_on_its_way(
    redis_url: str, key_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run cancelled at the drain deadline leaves its batched commit running; ``drain complete``
    must come after that commit (and its XACK, if any), never before."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", drain_timeout_s=0.2, rescuer=False,
                 handler_delay_ms=1)  # not instant: a run per message, all five at the ledger at once
    ledger = Ledger(s.ledger, busy_timeout_ms=15_000)  # the commit waits for the lock, then lands
    at_drain_complete = ChargesAtDrainComplete(s.ledger)
    worker_log = logging.getLogger("solutions.worker")
    caplog.set_level(logging.INFO, logger="solutions.worker")

    async def scenario() -> list[str]:
        worker = Worker(s, ledger=ledger)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.started.is_set(), 10, "the worker to start")
        produce(client, s.stream, 1)
        await until(lambda: worker.counts.processed == 1, 10, "the first charge (the ledger exists)")
        holder = await asyncio.to_thread(hold_ledger_lock, s.ledger)
        with reaped(holder):
            produce(client, s.stream, 5, start=1, orders=1000)
            pipeline = worker.pipeline
            assert pipeline is not None
            await until(lambda: pipeline.charges_on_their_way == 5, 10, "five charges waiting for the ledger")
            worker_log.addHandler(at_drain_complete)
            try:
                worker.request_stop()
                # The drain deadline cancels the runs; their commit is still waiting for the lock.
                await until(lambda: len(worker.pool) == 0, 10, "the runs cancelled at the deadline")
                assert pipeline.charges_on_their_way == 5 and not task.done()
                await asyncio.to_thread(release_ledger_lock, holder)
                summary = await asyncio.wait_for(task, 20)
            finally:
                worker_log.removeHandler(at_drain_complete)
            return summary.left_pending

    left = asyncio.run(scenario())
    assert len(left) == 5, "the drain deadline (0.2 s) hit while the ledger was locked"
    assert at_drain_complete.charged == [6], "drain complete came before the commit on its way"
    # Charged but never acked (their runs were cancelled): left pending, not acked without a charge.
    assert pending_ids(client, s.stream, s.group) == set(left)


@pytest.mark.slow
def test_repeated_sigterm_during_and_after_the_drain_still_exits_0(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    # systemd and shells signal a whole process group, and an impatient operator presses twice:
    # signals keep coming while the worker drains and after it has logged 'drain complete'.
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream, ledger, log = f"{key_prefix}orders", tmp_path / "ledger.sqlite3", tmp_path / "worker.log"
    ids = produce(client, stream, 40, orders=10)
    proc = spawn("solutions.billing", *worker_args(redis_url, stream, ledger, "w1", handler_delay_ms=300),
                 log_path=log)
    with reaped(proc):
        wait_until(lambda: charges(ledger), 15, "the first charge")
        signals = 0
        for _ in every(0.02, 20):  # a signal every 20 ms until the worker has exited
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
                signals += 1
        assert proc.wait(5) == 0
    text = log.read_text()
    assert signals > 1
    assert text.count("drain complete") == 1, text[-2000:]
    assert "already draining" in text, text[-2000:]
    charged = {msg_id for _, _, msg_id, _ in charges(ledger)}
    assert _delivered(client, stream, ids) - pending_ids(client, stream, "billing") <= charged, "acked, not charged"
