"""labs.exercises.nb09 on a real cluster: the notebook's own preparing cells, then right and wrong solutions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest
from redis.cluster import RedisCluster

from labs.exercises.edition import SOURCE_DIR
from labs.exercises.exercise import Verdict, evaluate
from labs.exercises.notebook import find
from labs.launcher.cluster import ClusterTopology
from solutions.shards import shard_of

pytestmark = pytest.mark.timeout(60)

NOTEBOOK = SOURCE_DIR / "09_cluster_streams.ipynb"


@pytest.fixture(scope="module")
def rc(cluster: ClusterTopology) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=cluster.addresses().ports[0], decode_responses=True)
    yield client
    client.close()


def prepared(exercise_id: str, client: RedisCluster, prefix: str) -> dict[str, Any]:
    """Run the exercise's preparing cell (from the notebook itself) in a fresh namespace."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("exercise") == exercise_id and "prepare" in c.id]
    ns: dict[str, Any] = {"r": client, "P": prefix, "time": time}
    exec(cell.source, ns)
    return ns


def verdict(exercise_id: str, ns: dict[str, Any], **answer: Any) -> Verdict:
    return evaluate(find(exercise_id), {**ns, **answer})


def test_owner_port_is_the_master_not_a_replica_nor_another_master(rc: RedisCluster) -> None:
    ns = prepared("09.1", rc, "t09:1:")
    assert "пока не определена" in verdict("09.1", ns).message  # the blank
    master = rc.get_node_from_key(ns["pay_stream"])
    assert verdict("09.1", ns, owner_port=master.port).passed
    replica = next(int(a.rsplit(":", 1)[1]) for a, node in rc.cluster_nodes().items() if "slave" in node["flags"])
    other = next(n.port for n in rc.get_primaries() if n.port != master.port)
    assert "порт реплики" in verdict("09.1", ns, owner_port=replica).message
    assert "не обслуживает слот" in verdict("09.1", ns, owner_port=other).message
    assert "числом" in verdict("09.1", ns, owner_port=str(master.port)).message
    rc.delete(ns["pay_stream"])


def test_a_dlq_outside_the_shards_slot_is_refused_before_anything_moves(rc: RedisCluster) -> None:
    ns = prepared("09.2", rc, "t09:2:")
    assert "CROSSSLOT" in verdict("09.2", ns, dlq_key="t09:2:ex:orders:7:dlq").message
    right = ns["ex_shard"] + ":dlq"
    assert "нет записи" in verdict("09.2", ns, dlq_key=right).message  # named well, script not called
    ns["dead_letter"](right)  # it prints what XACK returned; the check reads the DLQ and the PEL
    assert verdict("09.2", ns, dlq_key=right).passed
    rc.delete(ns["ex_shard"], right)


def test_route_checks_one_shard_per_order_and_the_shard_of_rule(rc: RedisCluster) -> None:
    ns = prepared("09.3", rc, "t09:3:")
    shards = ns["route_shards"]

    def send(pick: Any) -> None:
        for name in shards.names:
            rc.delete(name)
        for n in range(12):
            for seq in range(3):
                rc.xadd(pick(f"order-{n}", seq), {"order_id": f"order-{n}", "seq": seq})

    send(lambda order, seq: shards.names[seq % 3])  # round robin: an order in three shards
    assert "разошлись по разным шардам" in verdict("09.3", ns, sent=36).message
    send(lambda order, seq: shards.names[(shard_of(order, 3) + 1) % 3])  # one shard each, the wrong one
    assert "shard_of(order_id" in verdict("09.3", ns, sent=36).message
    send(lambda order, seq: shards.shard_for(order))
    assert "`sent`" in verdict("09.3", ns, sent=12).message
    assert verdict("09.3", ns, sent=36).passed
    for name in shards.names:
        rc.delete(name)


def test_moved_shares_are_recomputed_from_the_rule(rc: RedisCluster) -> None:
    ns = prepared("09.4", rc, "t09:4:")
    ids = ns["order_ids"]
    four = sum(shard_of(o, 3) != shard_of(o, 4) for o in ids) / len(ids)
    six = sum(shard_of(o, 3) != shard_of(o, 6) for o in ids) / len(ids)
    assert verdict("09.4", ns, moved_4=four, moved_6=six).passed
    assert "`moved_4` не сходится" in verdict("09.4", ns, moved_4=1 - four, moved_6=six).message
    assert "`moved_6` нет" in verdict("09.4", ns, moved_4=four, moved_6=four).message
    assert "доли" in verdict("09.4", ns, moved_4=75, moved_6=six).message
