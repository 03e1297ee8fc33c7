"""solutions.shards: shard names, tags chosen from CLUSTER SLOTS, one stable routing rule, one slot per shard."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections import Counter

import pytest
import redis
from billing_support import command

from labs.experiments.cluster_worker import startup_nodes
from labs.launcher.cluster import ClusterTopology
from solutions.cluster_router import ClusterRouter
from solutions.settings import Settings
from solutions.shards import (
    ShardCountError,
    ShardSet,
    ensure_shards,
    naive_tags,
    plan_tags,
    registry_key,
    shard_keys,
    shard_name,
    shard_of,
    shard_settings,
    slot_of,
)

pytestmark = pytest.mark.timeout(60)

# The slot layout redis-cli --cluster create gives three masters.
EVEN_LAYOUT = [[(0, 5460)], [(5461, 10922)], [(10923, 16383)]]


def _owner_port(cluster: ClusterTopology, key: str) -> int:
    with contextlib.closing(cluster.servers[0].client()) as client:
        slot = int(command(client, "CLUSTER", "KEYSLOT", key))
    owner = next(n for n in cluster.nodes() if n.is_master and n.owns(slot))
    return owner.port


def test_naive_tags_leave_a_master_without_a_shard_and_planned_tags_do_not(cluster: ClusterTopology) -> None:
    naive = Counter(_owner_port(cluster, shard_name("orders", t)) for t in naive_tags(3))
    assert sorted(naive.values()) == [1, 2], "{0},{1},{2}: two shards on one master, none on another"
    layout = [list(m.slots) for m in sorted((n for n in cluster.nodes() if n.is_master), key=lambda n: n.slots[0])]
    planned = plan_tags("orders", 3, layout)
    spread = Counter(_owner_port(cluster, shard_name("orders", t)) for t in planned)
    assert sorted(spread.values()) == [1, 1, 1]
    six = Counter(_owner_port(cluster, shard_name("orders", t)) for t in plan_tags("orders", 6, layout))
    assert sorted(six.values()) == [2, 2, 2]


def test_plan_tags_is_deterministic_and_gives_each_shard_its_own_slot() -> None:
    tags = plan_tags("orders", 6, EVEN_LAYOUT)
    assert tags == plan_tags("orders", 6, EVEN_LAYOUT)
    assert tags[0] != "0", "tag '0' hashes to the third master, so shard 0 needs another tag"
    slots = [slot_of(shard_name("orders", t)) for t in tags]
    assert len(set(slots)) == 6
    for i, slot in enumerate(slots):
        lo, hi = EVEN_LAYOUT[i % 3][0]
        assert lo <= slot <= hi


def test_slot_of_agrees_with_cluster_keyslot(cluster: ClusterTopology) -> None:
    keys = ["orders", "orders:{0}", "orders:{0}:dlq", "x{}y", "{a}b{c}", "processed:orders:{7}:billing:e1"]
    with contextlib.closing(cluster.servers[0].client()) as client:
        for key in keys:
            assert slot_of(key) == int(command(client, "CLUSTER", "KEYSLOT", key))


def test_shard_of_is_the_same_in_another_process_with_another_hash_seed() -> None:
    keys = [f"order-{i}" for i in range(50)]
    here = [shard_of(k, 6) for k in keys]
    code = "from solutions.shards import shard_of; print([shard_of(f'order-{i}', 6) for i in range(50)])"
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == str(here)
    assert set(here) == set(range(6)), "50 orders reach every one of 6 shards"
    # 0xCBF43926 is the published CRC-32 (IEEE) check value of "123456789", as Go's crc32.ChecksumIEEE gives it.
    assert [shard_of("123456789", n) for n in (3, 6, 7)] == [0xCBF43926 % n for n in (3, 6, 7)]


def test_every_key_of_a_shard_shares_its_slot_so_scripts_stay_single_slot(cluster: ClusterTopology) -> None:
    shard = shard_name("orders", "5")
    keys = shard_keys(shard, "billing")
    names = [keys.stream, keys.dlq, keys.rescuer_lease, keys.marker_prefix + "event-1", keys.stream + ":1-0"]
    assert {slot_of(k) for k in names} == {slot_of(shard)}
    per_shard = shard_settings(Settings(stream="orders"), shard)
    assert (per_shard.dlq_stream, per_shard.rescuer_lease_key) == (keys.dlq, keys.rescuer_lease)
    script = "for i, k in ipairs(KEYS) do redis.call('SET', k, '1', 'PX', 5000) end return #KEYS"
    with redis.Redis(port=_owner_port(cluster, shard)) as owner:
        assert command(owner, "EVAL", script, 4, *names[1:]) == 4
        with pytest.raises(redis.exceptions.ClusterCrossSlotError, match="same slot"):
            command(owner, "EVAL", script, 2, keys.dlq, "orders:dlq")
        owner.delete(*names[1:4])


def test_shard_set_is_chosen_once_and_kept(cluster: ClusterTopology) -> None:
    stream = "test:shards:orders"

    async def scenario() -> tuple[ShardSet, ShardSet, ShardSet, str]:
        async with await ClusterRouter.connect(startup_nodes(cluster)) as router:
            await router.client(registry_key(stream)).delete(registry_key(stream))
            first = await ensure_shards(router, stream, 3)
            again = await ensure_shards(router, stream, 3)
            known = await ensure_shards(router, stream)
            with pytest.raises(ShardCountError, match="has 3 shards"):
                await ensure_shards(router, stream, 4)
            owners = {router.owner(name) for name in first.names}
            await router.client(registry_key(stream)).delete(registry_key(stream))
            with pytest.raises(ShardCountError, match="no shards registered"):
                await ensure_shards(router, stream)
            return first, again, known, str(len(owners))

    first, again, known, n_owners = asyncio.run(scenario())
    assert first == again == known and len(first) == 3
    assert n_owners == "3", "the planned shards sit on three different masters"
    assert len({first.shard_for(f"order-{i}") for i in range(30)}) == 3
