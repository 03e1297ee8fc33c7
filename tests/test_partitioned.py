"""labs.launcher.partitioned: a cluster in namespaces with its two client namespaces, split at its leader."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from compare_support import require_brokers
from netns_support import skip_without_netns

from labs.launcher import netns
from labs.launcher.nats import stream_cluster
from labs.launcher.partitioned import CLIENT_MAJ, CLIENT_MIN, NatsPartitioned, in_hub

pytestmark = pytest.mark.timeout(180)


def test_nats_in_namespaces_splits_at_the_streams_leader_and_leaves_nothing(tmp_path: Path) -> None:
    skip_without_netns()
    require_brokers("nats")
    site = NatsPartitioned.start(tmp_path, sync_always=True)
    try:
        assert {CLIENT_MIN, CLIENT_MAJ} <= set(site.fabric.members)
        site.wait_queue("orders")
        leader = site.leader("orders")
        cut, majority = site.sides(leader)
        assert cut == [leader] and len(majority) == 2 and leader not in majority
        listed = site.address(majority)["urls"]
        assert isinstance(listed, list) and len(listed) == 2 and site.address([])["sync_always"] is True
        urls = [str(u) for u in listed]
        assert all(site.fabric.ip(name) in str(urls) for name in majority)
        site.fabric.partition([*cut, CLIENT_MIN], [*majority, CLIENT_MAJ])
        # the majority elects a leader of its own (Raft: 4-9 s; the bound leaves room for a loaded machine)
        state = in_hub(site.fabric, lambda: asyncio.run(_leader_among(urls, majority, 40.0)))
        assert state in majority, f"no new leader among {majority} within 40 s of the cut: last seen {state}"
        assert "minElectionTimeout" in site.timers() and "sync_interval: always" in site.durability()
    finally:
        names = [m.ns for m in site.fabric.members.values()]
        site.stop()
    assert not set(names) & set(netns.list_namespaces())


async def _leader_among(urls: list[str], members: list[str], timeout_s: float) -> str | None:
    from labs import polling

    async def look() -> str | None:
        try:
            return (await stream_cluster(urls, "orders"))["leader"]
        except Exception:  # no leader yet: the stream info request times out
            return None

    return await polling.poll_value_async(look, lambda leader: leader in members, timeout_s, poll_s=0.5)
