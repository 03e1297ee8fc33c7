"""The worker on a cluster site (solutions.cluster_site): every event charged once and in key order, a shard label on
/metrics, CLUSTERDOWN on one shard's master waited out with backoff (one line each way) while the other
shards keep charging, a locked ledger pausing every shard alike, and the CLI's clear lines for a wrong shard
count or a missing cluster."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from billing_support import ROOT, command, error_count, hold_ledger_lock, release_ledger_lock, until

from labs.experiments.cluster_load import fill, key_order_violations, read_charges
from labs.experiments.cluster_worker import running, startup_nodes, worker_settings
from labs.launcher.cluster import ClusterTopology
from labs.launcher.ports import free_port
from solutions.cluster_router import ClusterRouter
from solutions.metrics import total
from solutions.shards import ShardSet, ensure_shards, slot_of

pytestmark = pytest.mark.timeout(90)


def test_every_event_is_charged_once_in_key_order_and_metrics_carry_the_shard(
    cluster: ClusterTopology, tmp_path: Path
) -> None:
    ledger, port = tmp_path / "l.sqlite3", free_port()
    startup = startup_nodes(cluster)

    async def scenario() -> tuple[int, str, dict[str, Any]]:
        async with await ClusterRouter.connect(startup) as router:
            shards = await ensure_shards(router, "sw:basic", 3)
            events = await fill(router, shards, 200)
            s = worker_settings(startup, "sw:basic", 3, ledger, metrics_port=port, metrics_interval_s=0.2)
            async with running(s) as worker:
                await until(lambda: len(read_charges(ledger)) >= events and worker.counts.stream_length >= events,
                            30, f"{events} charges and a stream length of {events}", poll_s=0.05)
                body = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
                per_shard = worker.shard_counts()
                owners = {name: router.owner(name) for name in shards.names}
            pending = [(await router.client(n).xpending(n, "billing"))["pending"] for n in shards.names]
            assert pending == [0, 0, 0]
            assert len(set(owners.values())) == 3, "the planned tags put one shard on each master"
            return events, body, per_shard

    events, body, per_shard = asyncio.run(asyncio.wait_for(scenario(), 60))
    charges = read_charges(ledger)
    assert len(charges) == len({c.event_id for c in charges}) == events == 600
    assert key_order_violations(charges) == 0
    assert [s.processed for s in per_shard.values()] == [200, 200, 200]
    assert total(per_shard).processed == 600
    processed = [ln for ln in body.splitlines() if ln.startswith("billing_processed_total{")]
    assert len(processed) == 3  # one series per shard, under the single-stream name
    for index, name in enumerate(per_shard):
        line = next(ln for ln in processed if f'stream="{name}"' in ln)
        assert f'shard="{index}"' in line and line.endswith(" 200.0"), line
    assert body.count("# HELP billing_group_lag ") == 1


@pytest.mark.failover
def test_clusterdown_on_one_master_is_backoff_and_the_other_shards_keep_charging(
    healthy_cluster: ClusterTopology, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One master answers CLUSTERDOWN for every key (an uncovered slot with full coverage required)."""
    ledger, startup, window_s = tmp_path / "l.sqlite3", startup_nodes(healthy_cluster), 2.0

    async def scenario() -> tuple[int, float, int, int]:
        async with await ClusterRouter.connect(startup) as router:
            shards = await ensure_shards(router, "sw:down", 3)
            names = shards.names
            addr = router.owner(names[0])
            assert addr is not None
            down = healthy_cluster.server(addr[1])
            ranges = router.masters()[addr]
            spare = next(s for lo, hi in ranges for s in (lo, hi) if s != slot_of(names[0]))
            async with running(worker_settings(startup, "sw:down", 3, ledger)):
                with contextlib.closing(down.client()) as admin:
                    admin.config_set("cluster-require-full-coverage", "yes")
                    command(admin, "CLUSTER", "DELSLOTS", spare)
                    try:
                        await until(lambda: admin.cluster("INFO")["cluster_state"] == "fail", 5,
                                    "the node to say cluster_state:fail", poll_s=0.05)
                        before = error_count(down, "CLUSTERDOWN")
                        charged_before = len(read_charges(ledger))
                        started = time.monotonic()
                        await fill(router, ShardSet(shards.stream, shards.tags[1:]), 50, prefix="w")
                        await until(lambda: len(read_charges(ledger)) - charged_before >= 100, 20,
                                    "the other masters' shards to charge their 100 events", poll_s=0.05)
                        await until(lambda: error_count(down, "CLUSTERDOWN") - before >= 2
                                    and time.monotonic() - started >= window_s, 20,
                                    "the refused shard to be retried (twice at least)", poll_s=0.05)
                        attempts = error_count(down, "CLUSTERDOWN") - before
                        elapsed_s = time.monotonic() - started
                        charged_during = len(read_charges(ledger)) - charged_before
                    finally:
                        with contextlib.suppress(redis.ResponseError):
                            command(admin, "CLUSTER", "ADDSLOTS", spare)
                        admin.config_set("cluster-require-full-coverage", "no")
                filled = await fill(router, shards, 10, prefix="after")
                await until(lambda: len(read_charges(ledger)) >= charged_before + charged_during + filled, 15,
                            "the shard to come back after CLUSTERDOWN", poll_s=0.05)
            return attempts, elapsed_s, charged_during, slot_of(names[0])

    with caplog.at_level(logging.INFO, logger="solutions"):
        attempts, elapsed_s, charged_during, slot = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert charged_during == 100, "the shards on the other masters charged their 100 events meanwhile"
    # The reader and the rescuer of the refused shard share its client: a few calls a second, not a hot loop.
    assert 2 <= attempts <= 20 * elapsed_s, f"{attempts} CLUSTERDOWN replies in {elapsed_s:.1f} s"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"slot {slot} ")]
    assert sum("failed, retrying" in line for line in lines) == 1, lines
    assert sum("works again" in line for line in lines) == 1, lines


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "solutions.billing", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=False)


def test_cli_refuses_another_shard_count_and_shards_without_a_cluster(cluster: ClusterTopology, tmp_path: Path) -> None:
    node = f"127.0.0.1:{cluster.addresses().ports[0]}"

    async def register() -> None:
        async with await ClusterRouter.connect(startup_nodes(cluster)) as router:
            await ensure_shards(router, "sw:cli", 3)

    asyncio.run(register())
    wrong = run_cli("--cluster", node, "--stream", "sw:cli", "--shards", "4", "--ledger", str(tmp_path / "l.db"))
    assert wrong.returncode == 1
    errors = [ln for ln in wrong.stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and "has 3 shards (fixed for its life" in errors[0], wrong.stderr
    assert "Traceback" not in wrong.stderr
    lone = run_cli("--shards", "3", "--ledger", str(tmp_path / "l.db"))
    assert lone.returncode == 2
    assert lone.stderr.strip().splitlines() == [
        "billing-worker: error: invalid settings: shards needs cluster (a stream is sharded on a cluster) "
        "(see billing-worker --help)"
    ]


def test_a_locked_ledger_pauses_every_shard_and_nothing_is_dead_lettered(
    cluster: ClusterTopology, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One business store for every shard: its outage is one pause (one line each way), not attempts."""
    ledger, startup = tmp_path / "l.sqlite3", startup_nodes(cluster)

    async def scenario() -> tuple[float, int, int]:
        async with await ClusterRouter.connect(startup) as router:
            shards = await ensure_shards(router, "sw:store", 3)
            s = worker_settings(startup, "sw:store", 3, ledger, ledger_busy_timeout_ms=200, max_attempts=2,
                                min_idle_ms=300, claim_interval_ms=100)
            async with running(s) as worker:
                await fill(router, shards, 5, prefix="before")
                await until(lambda: len(read_charges(ledger)) >= 15, 20,
                            "the 15 events before the outage to be charged", poll_s=0.05)
                holder = hold_ledger_lock(ledger)
                try:
                    await fill(router, shards, 10, prefix="during")
                    await until(lambda: worker.counts.store_up != 1.0, 20, "the worker to see the store down",
                                poll_s=0.05)
                    await asyncio.sleep(1.5)  # longer than max_attempts x min_idle: attempts would dead-letter
                    store_up = worker.counts.store_up
                finally:
                    release_ledger_lock(holder)
                await until(lambda: len(read_charges(ledger)) >= 45, 20, "charging to resume on every shard",
                            poll_s=0.05)
                outages = worker.counts.store_outages
            dead = sum([int(await router.client(n).xlen(f"{n}:dlq")) for n in shards.names])
            return store_up, outages, dead

    with caplog.at_level(logging.INFO, logger="solutions"):
        store_up, outages, dead = asyncio.run(asyncio.wait_for(scenario(), 60))
    charges = read_charges(ledger)
    assert len(charges) == len({c.event_id for c in charges}) == 45 and dead == 0
    assert store_up == 0.0 and outages == 1  # one outage, seen by every shard alike
    lines = [r.getMessage() for r in caplog.records]
    assert sum(line.startswith("business store down") for line in lines) == 1, lines
    assert sum(line.startswith("business store back") for line in lines) == 1, lines


def test_no_cluster_at_start_is_one_line_and_sigterm_still_drains(tmp_path: Path) -> None:
    """Nothing listens on the node given: the worker waits with backoff (one line, no hot loop) and a
    SIGTERM meanwhile ends it cleanly."""
    proc = subprocess.Popen([sys.executable, "-m", "solutions.billing", "--cluster", f"127.0.0.1:{free_port()}",
                             "--shards", "3", "--ledger", str(tmp_path / "l.db")], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        # The signal comes once the worker is confirmed to be retrying (its handlers are in place by
        # then), never after a guessed pause: a slow start would otherwise die of SIGTERM's default.
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "connecting to the cluster" in line and "failed, retrying" in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
        lines += rest.strip().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "\n".join(lines)
    assert proc.returncode == 0, err
    assert sum("connecting to the cluster" in ln and "failed, retrying" in ln for ln in lines) == 1, err
    assert "drain complete" in lines[-1] and "Traceback" not in err
    assert len(lines) <= 4, err  # the failure, the signal, the drain: not a line per attempt
