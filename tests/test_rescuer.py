"""The rescuer: a dead consumer's messages are reclaimed (XAUTOCLAIM) and, with sqlite, charged once."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest
import redis
from billing_support import (
    charge_counts,
    charges,
    command_calls,
    pending_ids,
    produce,
    running,
    settings,
    spawn,
    stop_process,
    until,
    wait_until,
    worker_args,
)
from redis import asyncio as aioredis

from solutions.metrics import Metrics
from solutions.rescuer import Rescuer


@pytest.mark.slow
def test_kill_9_mid_flight_is_reclaimed_and_charged_exactly_once(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream, ledger = f"{key_prefix}orders", tmp_path / "ledger.sqlite3"
    n = 60
    produce(client, stream, n)
    a = spawn("solutions.billing", *worker_args(redis_url, stream, ledger, "worker-a", handler_delay_ms=300,
                                                 parallelism=8, min_idle_ms=1500, claim_interval_ms=200),
              log_path=tmp_path / "a.log")
    try:
        wait_until(lambda: len(charges(ledger)) >= 8, 15, "worker-a to charge a few events")
        wait_until(lambda: len(pending_ids(client, stream, "billing")) > 0, 5, "work in worker-a's hands")
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait(10)
    held = pending_ids(client, stream, "billing")
    assert held, "worker-a died holding messages"
    b = spawn("solutions.billing", *worker_args(redis_url, stream, ledger, "worker-b", min_idle_ms=1000,
                                                 claim_interval_ms=200),
              log_path=tmp_path / "b.log")
    try:
        wait_until(lambda: len(charge_counts(ledger)) == n, 20, "every event charged")
        wait_until(lambda: not pending_ids(client, stream, "billing"), 10, "an empty PEL")
    finally:
        assert stop_process(b) == 0
    counts = charge_counts(ledger)
    assert sorted(counts) == sorted(f"ev-{i}" for i in range(n))
    assert set(counts.values()) == {1}, "an event was charged twice"
    journal = (tmp_path / "b.log").read_text()
    reclaimed = [line for line in journal.splitlines() if "reclaim: worker-b took" in line]
    assert any("from worker-a" in line for line in reclaimed), journal[-2000:]
    assert "drain complete" in journal


def test_deleted_pending_entries_are_acked_and_counted(
    redis_url: str, key_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "ledger.sqlite3", min_idle_ms=0, claim_interval_ms=100,
                 rescuer=True)
    client.xgroup_create(s.stream, s.group, id="0", mkstream=True)
    ids = produce(client, s.stream, 3)
    client.xreadgroup(s.group, "ghost", {s.stream: ">"}, count=10)  # ghost reads, never acks, dies
    client.xdel(s.stream, ids[0], ids[1])
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: not pending_ids(client, s.stream, s.group), 10, "the ghost's PEL to empty")
            # Redis applies an XACK before the worker has read its reply and counted it: the PEL
            # empties first, the counts follow (the deleted entries' XACK and the charged one's).
            await until(lambda: worker.counts.deleted == 2 and worker.counts.processed == 1, 5,
                        "the worker to count the deleted entries and the charged one")
            assert worker.counts.reclaimed == 1
            assert worker.counts.processed == 1

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {"ev-2": 1}
    lines = [r.getMessage() for r in caplog.records if r.name == "solutions.journal"]
    assert any(f"took {ids[2]} from ghost" in line and "delivery 2" in line for line in lines), lines
    assert any("acked 2 deleted entries" in line for line in lines), lines


def test_only_one_rescuer_per_group(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s1 = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", consumer="one", claim_interval_ms=100)
    s2 = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", consumer="two", claim_interval_ms=100)

    async def scenario() -> None:
        async with running(s1) as w1, running(s2) as w2:
            assert w1.rescuer is not None and w2.rescuer is not None
            r1, r2 = w1.rescuer, w2.rescuer
            await until(lambda: r1.holding or r2.holding, 5, "a rescuer")
            target = command_calls(client, "evalsha") + 10  # both take or renew the lease every round

            def rounds_with_one_holder() -> bool:
                assert r1.holding != r2.holding, "two rescuers at once"
                return command_calls(client, "evalsha") >= target

            await until(rounds_with_one_holder, 10, "ten lease rounds")

    asyncio.run(scenario())


def test_a_stop_landing_while_the_lease_is_taken_still_gives_it_up(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The stop cancels the rescuer after Redis ran its lease script but before the reply was
    read: ``holding`` never turned True, yet the lease is ours and must go with the drain, or
    every other worker's rescuer waits out ``lease_ms``."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    s = settings(redis_url, key_prefix, tmp_path / "l.sqlite3", consumer="slow", claim_interval_ms=30_000)

    async def scenario() -> None:
        aclient = aioredis.Redis.from_url(redis_url, decode_responses=True)

        async def nothing(*_: object) -> int:
            return 0

        rescuer = Rescuer(aclient, s, Metrics(stream=s.stream, group=s.group, consumer=s.consumer), nothing, nothing)
        renew = rescuer._renew

        async def ran_then_cancelled(**kwargs: object) -> object:
            await renew(**kwargs)  # Redis gives us the lease ...
            raise asyncio.CancelledError  # ... and the stop lands before we hear it

        rescuer._renew = ran_then_cancelled  # type: ignore[assignment]  # a stand-in for the one method
        with pytest.raises(asyncio.CancelledError):
            await rescuer.take_lease()
        assert not rescuer.holding
        assert client.get(s.rescuer_lease_key) == "slow"  # held in Redis, unknown to the worker
        await rescuer.release_lease()
        assert client.get(s.rescuer_lease_key) is None
        await aclient.aclose()

    asyncio.run(scenario())
