"""Two cluster faults measured without a worker: the tail a failover loses, and who stalls while it runs.

:func:`cluster_tail_loss` is notebook 03's Sentinel experiment on one shard of the cluster: the
master acknowledges writes its replica never received (the link is cut on purpose with
:func:`~labs.experiments.replication.link_cut`), is killed with SIGKILL, the replica wins the
election, and the producer's own list of acknowledged IDs is checked against the new master.

:func:`coverage_stall` runs one raw writer per master (XADD every ``period_ms`` through the
shard router, backing off 10-20 ms) and kills one master. With ``cluster-require-full-coverage
yes`` every node refuses every key (``CLUSTERDOWN``) from the moment the dead master is flagged
failed until its replica is promoted, so the *other* shards stall too; with ``no`` (the lab
topology's setting) only the dead master's shard waits. The figure is each shard's longest gap
between acknowledged writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass

import redis

from labs.experiments.replication import TailLossResult, count_tail, write_tail_and_kill
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import owner, replicas_of
from labs.launcher.errors import LauncherError
from labs.polling import wait_until_async
from solutions.cluster_router import ClusterRouter, RoutingOptions, ShardClient
from solutions.shards import plan_tags, shard_name, slot_of

log = logging.getLogger(__name__)

FAILOVER_TIMEOUT_S = 30.0


def cluster_tail_loss(topology: ClusterTopology, *, stream: str, n_before: int, n_tail: int) -> TailLossResult:
    """Write linked, cut the link, write the tail, kill -9 the shard's master, count on the promoted replica.

    The same record as the Sentinel experiment (:class:`~labs.experiments.replication.TailLossResult`);
    ``wait_tail`` 0 means a producer using ``WAIT 1`` would have known the tail was unsafe. The
    killed master is started again afterwards and rejoins as a replica (its tail is discarded
    by the resync), so the topology is whole when this returns.
    """
    slot = slot_of(stream)
    view = topology.nodes()
    master = owner(view, slot)
    if master is None or not (replicas := replicas_of(view, master)):
        raise LauncherError(f"slot {slot} has no master with a replica")
    old, new = topology.server(master.port), replicas[0]
    writes = write_tail_and_kill(old, topology.server(new.port), stream=stream, n_before=n_before, n_tail=n_tail)
    topology.wait_serving(new, slot, writes.killed_at + FAILOVER_TIMEOUT_S)
    result = count_tail(
        topology.server(new.port), stream, writes, ("127.0.0.1", master.port), ("127.0.0.1", new.port)
    )
    with contextlib.closing(topology.server(new.port).client()) as client:
        client.delete(stream)
    topology.start(old)
    topology.wait_ready()
    log.info("cluster failover %s -> %s in %.1f s: %s", master.port, new.port, result.failover_s, result)
    return result


@dataclass(frozen=True)
class ShardGap:
    shard: str
    master: int  # the port that served it before the kill
    killed: bool  # its master was the one killed
    writes: int
    longest_gap_s: float  # between two acknowledged writes, from just before the kill to the end
    clusterdown_replies: int | None  # CLUSTERDOWN errors its master sent meanwhile (None: the killed one)


@dataclass(frozen=True)
class CoverageStall:
    full_coverage: bool
    failover_s: float
    shards: tuple[ShardGap, ...]

    @property
    def killed_gap_s(self) -> float:
        return max(s.longest_gap_s for s in self.shards if s.killed)

    @property
    def others_gap_s(self) -> float:
        """The longest stall of a shard whose master was *not* killed."""
        return max(s.longest_gap_s for s in self.shards if not s.killed)


async def coverage_stall(
    topology: ClusterTopology, *, stream: str, full_coverage: bool, period_ms: int = 5, settle_s: float = 0.5
) -> CoverageStall:
    """Raw writers on one shard per master, kill -9 the first shard's master, each shard's longest gap.

    Sets ``cluster-require-full-coverage`` on every node for the run and back to ``no`` after
    it; the killed master is restarted and the topology waited ready again before returning.
    """
    set_full_coverage(topology, full_coverage)
    startup = [("127.0.0.1", p) for p in topology.addresses().ports]
    options = RoutingOptions(backoff_base_s=0.01, backoff_cap_s=0.02, retry_for_s=FAILOVER_TIMEOUT_S)
    try:
        async with await ClusterRouter.connect(startup, options) as router:
            layout = [ranges for _, ranges in sorted(router.masters().items(), key=lambda item: item[1][0])]
            names = [shard_name(stream, t) for t in plan_tags(stream, len(layout), layout)]
            ports = [addr[1] for name in names if (addr := router.owner(name))]
            refused = [clusterdown_replies(topology, port) for port in ports]
            acks: dict[str, list[float]] = {name: [] for name in names}
            stop = asyncio.Event()
            writers = [asyncio.create_task(_write(router.client(n), acks[n], stop, period_ms)) for n in names]
            await _every_shard_acked(acks, writers)  # confirmed before the kill, not assumed after a pause
            await asyncio.sleep(settle_s)
            killed_at = time.monotonic()
            result = await asyncio.to_thread(topology.failover, hard=True, master_port=ports[0], restart_old=False)
            await asyncio.sleep(settle_s)
            stop.set()
            await asyncio.gather(*writers)
            refused = [clusterdown_replies(topology, port) - before
                       for port, before in zip(ports, refused, strict=True)]
            for name in names:
                await router.client(name).delete(name)
    finally:
        set_full_coverage(topology, False)
        await asyncio.to_thread(topology.ensure)
    gaps = tuple(
        ShardGap(
            shard=name,
            master=port,
            killed=i == 0,
            writes=len(acks[name]),
            longest_gap_s=_longest_gap(acks[name], killed_at - 0.1),
            clusterdown_replies=None if i == 0 else refused[i],
        )
        for i, (name, port) in enumerate(zip(names, ports, strict=True))
    )
    return CoverageStall(full_coverage, result.elapsed_s, gaps)


async def _write(client: ShardClient, acks: list[float], stop: asyncio.Event, period_ms: int) -> None:
    """XADD every ``period_ms`` until ``stop``; each acknowledgement's time goes into ``acks``."""
    while not stop.is_set():
        await client.xadd(client.key, {"t": "1"})
        acks.append(time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period_ms / 1000)


async def _every_shard_acked(acks: dict[str, list[float]], writers: list[asyncio.Task[None]]) -> None:
    """Wait until every shard's writer has had a write acknowledged (or one of them stopped)."""
    await wait_until_async(lambda: all(acks.values()) or any(w.done() for w in writers), FAILOVER_TIMEOUT_S,
                           "a first ack on every shard", 0.01)
    if not all(acks.values()):
        await asyncio.gather(*writers)  # raises what stopped it


def _longest_gap(times: list[float], since: float) -> float:
    window = [t for t in times if t >= since]
    return max((b - a for a, b in itertools.pairwise(window)), default=0.0)


def clusterdown_replies(topology: ClusterTopology, port: int) -> int:
    """``INFO errorstats`` on one node: how many ``CLUSTERDOWN`` replies it has sent (0 when it is down)."""
    with contextlib.closing(topology.server(port).client()) as client:
        try:
            stats = client.info("errorstats")
        except redis.ConnectionError:
            return 0
    return int(stats.get("errorstat_CLUSTERDOWN", {}).get("count", 0))


def set_full_coverage(topology: ClusterTopology, required: bool) -> None:
    """``CONFIG SET cluster-require-full-coverage yes|no`` on every running node."""
    for proc in topology.servers:
        if proc.pid() is None:
            continue
        with contextlib.closing(proc.client()) as client, contextlib.suppress(redis.ConnectionError):
            client.config_set("cluster-require-full-coverage", "yes" if required else "no")
