"""labs.experiments.cluster_routing: RedisCluster spends two COMMAND GETKEYS per XREADGROUP, the shard router none."""

from __future__ import annotations

import asyncio

import pytest

from labs.experiments.cluster_routing import measure
from labs.launcher.cluster import ClusterTopology

pytestmark = pytest.mark.timeout(60)


def test_rediscluster_asks_getkeys_twice_per_xreadgroup_and_the_router_never(cluster: ClusterTopology) -> None:
    costs = {c.client: c for c in asyncio.run(measure(cluster, stream="test:getkeys:{0}", reads=50, rounds=1))}
    assert (costs["RedisCluster"].commands_per_read, costs["RedisCluster"].getkeys_per_read) == (3.0, 2.0)
    for name in ("ClusterRouter", "plain client on the owner"):
        assert (costs[name].commands_per_read, costs[name].getkeys_per_read) == (1.0, 0.0)
    assert all(c.us_per_read > 0 for c in costs.values())
