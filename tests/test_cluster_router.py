"""solutions.cluster_router on a real cluster: each shard's commands reach only its master, MOVED after a
failover is followed (by a blocked read and a pipeline too), a kill -9 is ridden out with one log line each
way, and CLUSTERDOWN is waited out with backoff, not a hot loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from billing_support import command, error_count, until, wait_until

from labs.experiments.cluster_worker import startup_nodes
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import nodes_view, owner, replicas_of
from labs.launcher.process import RedisProcess
from solutions.cluster_router import ClusterRouter, RoutingOptions
from solutions.shards import plan_tags, shard_name, slot_of

pytestmark = pytest.mark.timeout(60)


def command_calls(proc: RedisProcess) -> dict[str, int]:
    """``INFO commandstats`` of one node: calls per command (``command|getkeys`` for subcommands)."""
    with contextlib.closing(proc.client()) as client:
        stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def live_masters(cluster: ClusterTopology) -> list[tuple[int, list[tuple[int, int]]]]:
    return [(n.port, list(n.slots)) for n in sorted(cluster.nodes(), key=lambda n: n.slots[0] if n.slots else (0, 0))
            if n.is_master and n.slots]


@pytest.fixture
def reset_stats(cluster: ClusterTopology) -> Iterator[None]:
    for proc in cluster.servers:
        with contextlib.closing(proc.client()) as client:
            client.config_resetstat()
    yield


def test_each_shards_commands_reach_only_its_own_master(cluster: ClusterTopology, reset_stats: None) -> None:
    layout = live_masters(cluster)
    names = [shard_name("test:route", t) for t in plan_tags("test:route", 3, [r for _, r in layout])]

    async def scenario() -> None:
        async with await ClusterRouter.connect(startup_nodes(cluster)) as router:
            assert router.masters() == {("127.0.0.1", port): ranges for port, ranges in layout}
            for name in names:
                shard = router.client(name)
                await shard.delete(name)
                await shard.xgroup_create(name, "g", id="0", mkstream=True)
                async with shard.pipeline(transaction=False) as pipe:
                    pipe.xadd(name, {"n": "1"}).xadd(name, {"n": "2"})
                    first, _ = await pipe.execute()
                got = await shard.xreadgroup("g", "c", {name: ">"}, count=10)
                assert len(got[0][1]) == 2
                assert await shard.xack(name, "g", first) == 1
                await shard.xautoclaim(name, "g", "c2", min_idle_time=0)
                length = shard.register_script("return redis.call('XLEN', KEYS[1])")
                assert await length(keys=[name]) == 2

    asyncio.run(scenario())
    owners = {name: next(port for port, ranges in layout if any(lo <= slot_of(name) <= hi for lo, hi in ranges))
              for name in names}
    assert len(set(owners.values())) == 3
    master_ports = {port for port, _ in layout}
    for proc in cluster.servers:
        calls = command_calls(proc)
        assert "command|getkeys" not in calls, "the router never asks a node where a key lives"
        if proc.port not in master_ports:  # a replica only gets its master's replication stream
            assert not any(calls.get(cmd) for cmd in ("xreadgroup", "xautoclaim", "evalsha")), calls
            continue
        mine = sum(1 for port in owners.values() if port == proc.port)
        assert mine == 1
        for cmd in ("xreadgroup", "xack", "xautoclaim", "xgroup|create", "script|load"):
            assert calls.get(cmd, 0) == mine, (proc.port, cmd, calls)
        assert calls.get("xadd", 0) == 2 and calls.get("evalsha", 0) == 2, "EVALSHA: NOSCRIPT, SCRIPT LOAD, again"


def test_a_stale_map_is_corrected_by_moved_for_commands_transactions_and_scripts(cluster: ClusterTopology) -> None:
    name = "test:stale:{s}"

    async def scenario() -> list[Any]:
        async with await ClusterRouter.connect(startup_nodes(cluster)) as router:
            shard = router.client(name)
            right = router.owner(name)
            wrong = next(addr for addr in router.masters() if addr != right)
            seen = []
            router.slot_map.moved(shard.slot, wrong)
            async with shard.pipeline(transaction=True) as pipe:  # MULTI: refused whole, then sent again
                pipe.set(name, 1).incr(name)
                seen.append(await pipe.execute())
            router.slot_map.moved(shard.slot, wrong)
            async with shard.pipeline(transaction=False) as pipe:  # errors in place: MOVED still followed
                pipe.incr(name).incr(name)
                seen.append(await pipe.execute(raise_on_error=False))
            router.slot_map.moved(shard.slot, wrong)
            seen.append(await shard.get(name))
            router.slot_map.moved(shard.slot, wrong)
            seen.append(await shard.register_script("return redis.call('INCR', KEYS[1])")(keys=[name]))
            seen.append(router.owner(name) == right)
            await shard.delete(name)
            return seen

    assert asyncio.run(scenario()) == [[True, 2], [3, 4], b"4", 5, True], "each ran once, on the right master"


@pytest.mark.failover
def test_moved_after_cluster_failover_is_followed_by_a_blocked_read_and_a_pipeline(
    healthy_cluster: ClusterTopology, caplog: pytest.LogCaptureFixture
) -> None:
    name = shard_name("test:moved", "a")
    options = RoutingOptions(socket_timeout_s=10.0)

    async def scenario() -> tuple[Any, tuple[str, int] | None, tuple[str, int] | None]:
        async with await ClusterRouter.connect(startup_nodes(healthy_cluster), options) as router:
            shard = router.client(name)
            await shard.delete(name)
            await shard.xgroup_create(name, "g", id="$", mkstream=True)
            before = router.owner(name)
            reader = asyncio.create_task(shard.xreadgroup("g", "c", {name: ">"}, count=1, block=8000))
            blocked_on = healthy_cluster.server(before[1] if before else 0)
            with contextlib.closing(blocked_on.client()) as c:
                await until(lambda: int(c.info("clients")["blocked_clients"]) >= 1, 5.0,
                            f"a client blocked on {blocked_on.name}")
            await asyncio.to_thread(healthy_cluster.failover, master_port=before[1] if before else None)
            async with shard.pipeline(transaction=False) as pipe:
                pipe.xadd(name, {"after": "failover"})
                (msg_id,) = await pipe.execute()
            got = await asyncio.wait_for(reader, 10)
            assert got[0][1][0][0] == msg_id, "the blocked read moved to the new master and got the entry"
            return got, before, router.owner(name)

    with caplog.at_level(logging.INFO, logger="solutions"):
        _, before, after = asyncio.run(scenario())
    assert before != after and after is not None
    view = {n.port: n for n in healthy_cluster.nodes()}
    assert view[after[1]].is_master and view[after[1]].owns(slot_of(name))
    assert any("moved:" in r.getMessage() for r in caplog.records)


@pytest.mark.failover
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill-9", "sigstop"])
def test_a_dead_or_hung_master_is_ridden_out_with_one_log_line_each_way(
    healthy_cluster: ClusterTopology, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """kill -9, or SIGSTOP (a master that hangs instead of dying: its socket accepts, nothing answers)."""
    name = shard_name("test:kill", "k")
    options = RoutingOptions(socket_timeout_s=1.0)

    async def scenario() -> tuple[list[float], float]:
        async with await ClusterRouter.connect(startup_nodes(healthy_cluster), options) as router:
            shard = router.client(name)
            owner = router.owner(name)
            assert owner is not None
            acked: list[float] = []
            stop = asyncio.Event()

            async def writer() -> None:
                while not stop.is_set():
                    await shard.xadd(name, {"t": str(time.time())})
                    acked.append(time.monotonic())
                    await asyncio.sleep(0.01)

            task = asyncio.create_task(writer())
            await until(lambda: acked or task.done(), 10, "the writer's first ack")
            killed_at = time.monotonic()
            if fault == "kill-9":
                await asyncio.to_thread(healthy_cluster.failover, hard=True, master_port=owner[1], restart_old=False)
            else:
                await asyncio.to_thread(_hang_until_replaced, healthy_cluster, owner[1])
            promoted_at = time.monotonic()
            await until(lambda: (acked and acked[-1] > promoted_at) or task.done(), 10,
                        "a write acknowledged after the promotion")
            stop.set()
            await task  # no error ever reached the writer
            await shard.delete(name)
            return acked, killed_at

    with caplog.at_level(logging.INFO, logger="solutions"):
        acked, killed_at = asyncio.run(scenario())
    assert any(t > killed_at + 1.0 for t in acked), "writes went on after the promotion"
    lines = [r.getMessage() for r in caplog.records if f"slot {slot_of(name)} " in r.getMessage()]
    failed = [line for line in lines if "failed, retrying" in line]
    works = [line for line in lines if "works again after" in line]
    assert len(failed) == 1 and len(works) == 1, lines
    attempts = int(works[0].split("after ")[1].split(" ")[0])
    assert 1 <= attempts <= 30, f"backoff, not a hot loop: {works[0]}"


@pytest.mark.failover
def test_watch_frees_a_read_blocked_on_a_hung_master(healthy_cluster: ClusterTopology) -> None:
    """Without the watch the read would wait out its 12 s socket timeout on the stopped master."""
    name = shard_name("test:watch", "w")
    options = RoutingOptions(socket_timeout_s=12.0)

    async def scenario() -> float:
        async with await ClusterRouter.connect(startup_nodes(healthy_cluster), options) as router:
            shard = router.client(name)
            await shard.delete(name)
            await shard.xgroup_create(name, "g", id="$", mkstream=True)
            owner = router.owner(name)
            assert owner is not None
            watch = asyncio.create_task(router.watch(interval_s=0.2))
            reader = asyncio.create_task(shard.xreadgroup("g", "c", {name: ">"}, count=1, block=10_000))
            blocked_on = healthy_cluster.server(owner[1])
            with contextlib.closing(blocked_on.client()) as c:
                await until(lambda: int(c.info("clients")["blocked_clients"]) >= 1, 5.0,
                            f"a client blocked on {blocked_on.name}")
            stopped_at = time.monotonic()
            pid = healthy_cluster.server(owner[1]).pid()
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.to_thread(_wait_promoted, healthy_cluster, owner[1])
                msg_id = await shard.xadd(name, {"after": "stall"})  # to the new master
                got = await asyncio.wait_for(reader, 8)
                elapsed_s = time.monotonic() - stopped_at
            finally:
                os.kill(pid, signal.SIGCONT)
                watch.cancel()
            assert got[0][1][0][0] == msg_id
            await shard.delete(name)
            return elapsed_s

    elapsed_s = asyncio.run(scenario())
    assert elapsed_s < 10.0, "the read moved before its BLOCK (10 s) or socket timeout (12 s) ran out"


def _wait_promoted(cluster: ClusterTopology, port: int) -> None:
    """Until the replica of the (stopped) master at ``port`` says it serves that master's slots."""
    view = cluster.nodes()
    master = next(n for n in view if n.port == port)
    replica = replicas_of(view, master)[0]
    promoted = cluster.server(replica.port)
    wait_until(lambda: (o := owner(nodes_view(promoted) or [], master.slots[0][0])) is not None
               and o.node_id == replica.node_id, 30, f"{replica.port} to be promoted")


def _hang_until_replaced(cluster: ClusterTopology, port: int) -> None:
    """SIGSTOP the master at ``port`` until its replica serves its slots, then SIGCONT it."""
    pid = cluster.server(port).pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        _wait_promoted(cluster, port)  # the launcher's wait_serving asks every node; a stopped one never answers
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.failover
def test_clusterdown_is_waited_out_with_backoff_not_a_hot_loop(
    healthy_cluster: ClusterTopology, caplog: pytest.LogCaptureFixture
) -> None:
    name = shard_name("test:down", "d")
    port = next(p for p, ranges in live_masters(healthy_cluster) if any(lo <= slot_of(name) <= hi for lo, hi in ranges))
    node = healthy_cluster.server(port)
    lo = next(lo for p, ranges in live_masters(healthy_cluster) if p == port for lo, _ in ranges)
    other_slot = lo if lo != slot_of(name) else lo + 1
    window_s = 2.0
    with contextlib.closing(node.client()) as admin:
        # One uncovered slot on this node plus full coverage required: it answers CLUSTERDOWN for every key.
        admin.config_set("cluster-require-full-coverage", "yes")
        command(admin, "CLUSTER", "DELSLOTS", other_slot)
        try:
            wait_until(lambda: admin.cluster("INFO")["cluster_state"] == "fail", 5,
                       "the node to say cluster_state:fail")

            async def scenario() -> int:
                async with await ClusterRouter.connect(startup_nodes(healthy_cluster)) as router:
                    task = asyncio.create_task(router.client(name).xadd(name, {"n": "1"}))
                    before = error_count(node, "CLUSTERDOWN")
                    await asyncio.sleep(window_s)
                    attempts = error_count(node, "CLUSTERDOWN") - before
                    assert not task.done()
                    command(admin, "CLUSTER", "ADDSLOTS", other_slot)
                    admin.config_set("cluster-require-full-coverage", "no")
                    await asyncio.wait_for(task, 10)
                    await router.client(name).delete(name)
                    return attempts

            with caplog.at_level(logging.INFO, logger="solutions"):
                attempts = asyncio.run(scenario())
        finally:
            with contextlib.suppress(redis.ResponseError):
                command(admin, "CLUSTER", "ADDSLOTS", other_slot)
            admin.config_set("cluster-require-full-coverage", "no")
    assert 3 <= attempts <= 20, f"{attempts} attempts in {window_s} s: backoff, not a hot loop"
    lines = [r.getMessage() for r in caplog.records if f"slot {slot_of(name)} " in r.getMessage()]
    assert sum("failed, retrying" in line for line in lines) == 1, lines
    assert sum("works again" in line for line in lines) == 1, lines


def test_no_startup_node_answering_is_one_connection_error() -> None:
    from labs.launcher.ports import free_port

    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        asyncio.run(ClusterRouter.connect([("127.0.0.1", free_port())]))
    assert time.monotonic() - started < 2.0


@pytest.mark.failover
def test_a_pipeline_that_reads_errors_in_place_gets_clusterdown_back_when_the_router_gives_up(
    healthy_cluster: ClusterTopology,
) -> None:
    """raise_on_error=False (how billing-producer tells a refusal from an unknown outcome): CLUSTERDOWN is
    waited out for retry_for_s, then handed back in place, not raised."""
    name = shard_name("test:refused", "r")
    port = next(p for p, ranges in live_masters(healthy_cluster) if any(lo <= slot_of(name) <= hi for lo, hi in ranges))
    node = healthy_cluster.server(port)
    lo = next(lo for p, ranges in live_masters(healthy_cluster) if p == port for lo, _ in ranges)
    other_slot = lo if lo != slot_of(name) else lo + 1
    with contextlib.closing(node.client()) as admin:
        admin.config_set("cluster-require-full-coverage", "yes")
        command(admin, "CLUSTER", "DELSLOTS", other_slot)
        try:
            wait_until(lambda: admin.cluster("INFO")["cluster_state"] == "fail", 5,
                       "the node to say cluster_state:fail")

            async def scenario() -> tuple[list[Any], float]:
                options = RoutingOptions(retry_for_s=0.5)
                async with await ClusterRouter.connect(startup_nodes(healthy_cluster), options) as router:
                    started = time.monotonic()
                    async with router.client(name).pipeline(transaction=False) as pipe:
                        pipe.xadd(name, {"n": "1"})
                        replies = await pipe.execute(raise_on_error=False)
                    return replies, time.monotonic() - started

            replies, waited_s = asyncio.run(scenario())
        finally:
            with contextlib.suppress(redis.ResponseError):
                command(admin, "CLUSTER", "ADDSLOTS", other_slot)
            admin.config_set("cluster-require-full-coverage", "no")
    assert len(replies) == 1 and isinstance(replies[0], redis.exceptions.ClusterDownError), replies
    assert waited_s >= 0.5, "it was waited out for retry_for_s first"
