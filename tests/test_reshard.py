"""labs.launcher.reshard: a slot moves with its stream, consumer group and PEL, and the router follows
(ASK while the move runs, MOVED after it)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis
from billing_support import command_calls

from labs.experiments.cluster_worker import startup_nodes
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import masters, owner
from labs.launcher.process import command
from labs.launcher.reshard import begin_migration, finish_migration, migrate_keys, move_slot
from solutions.cluster_router import ClusterRouter
from solutions.shards import shard_name, slot_of

pytestmark = pytest.mark.timeout(60)


def _other_master(cluster: ClusterTopology, key: str) -> tuple[int, int]:
    """(port of the master serving ``key``, port of another master)."""
    view = cluster.nodes()
    serving = owner(view, slot_of(key))
    assert serving is not None
    return serving.port, next(m.port for m in masters(view) if m.port != serving.port)


def test_stream_moves_with_group_and_pel_and_the_router_follows_moved(cluster: ClusterTopology) -> None:
    name = shard_name("test:reshard", "m")
    source, target = _other_master(cluster, name)

    async def before_move() -> list[str]:
        async with await ClusterRouter.connect(startup_nodes(cluster)) as router:
            shard = router.client(name)
            await shard.delete(name)
            await shard.xgroup_create(name, "billing", id="0", mkstream=True)
            for i in range(5):
                await shard.xadd(name, {"n": str(i)})
            got = await shard.xreadgroup("billing", "c1", {name: ">"}, count=10)
            return [msg_id.decode() for msg_id, _ in got[0][1]]

    ids = asyncio.run(before_move())
    move = move_slot(cluster, slot_of(name), target)
    assert (move.source.port, move.target.port) == (source, target)

    with redis.Redis(port=target, decode_responses=True) as new_owner:
        pending = new_owner.xpending(name, "billing")
        assert pending["pending"] == 5 and pending["consumers"] == [{"name": "c1", "pending": 5}]
        assert new_owner.xinfo_groups(name)[0]["last-delivered-id"] == ids[-1]
    with redis.Redis(port=source) as old_owner:
        assert command(old_owner, "CLUSTER", "COUNTKEYSINSLOT", slot_of(name)) == 0

    async def after_move() -> tuple[int, int, tuple[str, int] | None]:
        async with await ClusterRouter.connect([("127.0.0.1", source)]) as router:
            router.slot_map.moved(slot_of(name), ("127.0.0.1", source))  # a map from before the move
            shard = router.client(name)
            acked = await shard.xack(name, "billing", *ids)
            left = (await shard.xpending(name, "billing"))["pending"]
            await shard.delete(name)
            return acked, left, router.owner(name)

    acked, left, routed_to = asyncio.run(after_move())
    assert (acked, left) == (5, 0), "XACK went to the new owner and emptied the PEL there"
    assert routed_to == ("127.0.0.1", target)


def test_ask_during_a_migration_is_followed_without_changing_the_map(cluster: ClusterTopology) -> None:
    name = shard_name("test:reshard", "a")
    source, target = _other_master(cluster, name)

    async def write(n: str) -> tuple[str, tuple[str, int] | None]:
        async with await ClusterRouter.connect(startup_nodes(cluster)) as router:
            msg_id = await router.client(name).xadd(name, {"n": n})
            return msg_id.decode(), router.owner(name)

    asyncio.run(write("before"))
    move = begin_migration(cluster, slot_of(name), target)
    try:
        assert migrate_keys(cluster, move, keys=[name]) == 1
        with contextlib.closing(cluster.server(target).client()) as target_client:
            asking_before = command_calls(target_client, "asking")
            _, routed_to = asyncio.run(write("during"))
            assert routed_to == ("127.0.0.1", source), "ASK is one-off: the slot still belongs to the source"
            assert command_calls(target_client, "asking") == asking_before + 1
    finally:
        migrate_keys(cluster, move)
        finish_migration(cluster, move)
    with redis.Redis(port=target, decode_responses=True) as new_owner:
        assert [fields["n"] for _, fields in new_owner.xrange(name)] == ["before", "during"]
    _, routed_to = asyncio.run(write("after"))
    assert routed_to == ("127.0.0.1", target)
