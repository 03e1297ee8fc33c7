"""The cluster's minority side: one master cut off with a client keeps acknowledging, then refuses.

The topology is ``cluster`` with ``--netns`` (:mod:`labs.launcher.netns`). One master and client
``a`` are cut off from the other five nodes and client ``b``. The master still answers its client:
it marks the others ``fail?`` only after ``cluster-node-timeout`` without a pong, and only then, seeing
no majority of masters, declares ``cluster_state:fail`` and refuses with ``CLUSTERDOWN``. Meanwhile
the majority flags it failed and elects its replica (after the same timeout, plus the election's
0.5-1 s delay). At the heal the old master sees the higher config epoch, becomes a replica of the
promoted one and throws away what it acknowledged alone: about one node timeout of writes.

Client ``b`` writes on the majority side to the same slot through the replica (``MOVED`` until it is
promoted) and to another shard (``other``), which never notices. :func:`run_timeouts` runs one
cluster per node timeout side by side. Tests in ``tests/test_cluster_minority.py``; notebook 09.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import plotly.graph_objects as go
import redis
from plotly.subplots import make_subplots
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from labs.experiments.partition_writes import CHART_WORDS, Writer, WriterResult, add_acked_traces, result, wait_for
from labs.launcher import netns, topologies
from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import ClusterNode, cluster_info, masters, nodes_view, replicas_of
from labs.launcher.process import RedisProcess

log = logging.getLogger(__name__)

SOCKET_TIMEOUT_S = 0.5
NODE_TIMEOUTS_MS = (1000, 3000)
REJOIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class MinorityRun:
    """One cut: times in s from it; client ``a`` (minority), ``b`` (majority, same slot), ``other`` (another shard)."""

    node_timeout_ms: int
    refused_s: float  # the first write client a saw refused after the cut
    promoted_s: float  # the replica reports role master
    healed_s: float
    rejoined_s: float  # the old master is a linked replica of the promoted one
    writers: tuple[WriterResult, ...]

    def writer(self, name: str) -> WriterResult:
        return next(w for w in self.writers if w.name == name)

    @property
    def window_s(self) -> float:
        """How long the cut-off master kept acknowledging (its last ack after the cut)."""
        return self.writer("a").last_ack_s

    @property
    def two_masters_s(self) -> float:
        """How long the old master still acknowledged after the replica was promoted (0: never).

        Both sides time out on their own clocks: the minority master stops at its own ``fail?`` marks
        (one to one and a half node timeouts), the majority promotes after its marks, the failure
        reports' gossip and the election delay. The two ranges overlap, so for a moment the slot can
        have two masters that both acknowledge (seen in CI at 3000 ms).
        """
        return max(0.0, self.window_s - self.promoted_s)


def key_for(node: ClusterNode, stem: str) -> str:
    """A key whose hash slot ``node`` serves (``{stem-N}`` for the first N that lands there)."""
    for n in range(100_000):
        key = f"{{{stem}-{n}}}"
        if node.owns(key_slot(key.encode())):
            return key
    raise ValueError(f"no key for node {node.port}")


def _plain(host: str, port: int) -> redis.Redis:
    return redis.Redis(host=host, port=port, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S,
                       retry=Retry(NoBackoff(), 0))


def run_timeout(
    run_dir: Path, node_timeout_ms: int, *, partition_s: float | None = None, interval_ms: int = 10
) -> MinorityRun:
    """One cluster in namespaces with ``cluster-node-timeout node_timeout_ms``, one cut and heal; then removed.

    ``partition_s`` defaults to two node timeouts plus 3 s: enough for the promotion.
    """
    topo = topologies.on_free_ports("cluster", run_dir, netns=True)
    topo.node_timeout_ms = node_timeout_ms
    cut_s = partition_s if partition_s is not None else 2 * node_timeout_ms / 1000 + 3.0
    try:
        topo.ensure()
        return _partitioned(topo, cut_s, interval_ms / 1000)
    finally:
        topo.stop()


def _partitioned(topo: ClusterTopology, partition_s: float, interval_s: float) -> MinorityRun:
    fabric = topo.fabric
    assert fabric is not None
    view = topo.nodes()
    cut_master, other_master = masters(view)[:2]
    old, new = topo.server(cut_master.port), topo.server(replicas_of(view, cut_master)[0].port)
    other = topo.server(other_master.port)
    side_a, side_b = fabric.add("client-a"), fabric.add("client-b")
    key, other_key = key_for(cut_master, "minority"), key_for(other_master, "other")
    writers = {"a": Writer("a", key, interval_s), "b": Writer("b", key, interval_s),
               "other": Writer("other", other_key, interval_s)}
    targets = {"a": (side_a.ns, old), "b": (side_b.ns, new), "other": (side_b.ns, other)}
    stop = threading.Event()
    threads = [
        netns.run_thread(ns, partial(writers[n].run, partial(_plain, proc.host, proc.port), stop), f"writer-{n}")
        for n, (ns, proc) in targets.items()
    ]
    try:
        wait_for(lambda: writers["a"].count("acked") >= 50 and writers["other"].count("acked") >= 50, 20,
                 "the clients to write")
        cut = time.monotonic()
        fabric.partition([old.name, "client-a"], [p.name for p in topo.servers if p is not old] + ["client-b"])
        promoted = wait_for(lambda: _role(new) == "master", 30, "the majority to promote the replica")
        stop.wait(max(0.0, cut + partition_s - time.monotonic()))
        healed = time.monotonic()
        fabric.heal()
        rejoined = wait_for(lambda: _rejoined(old, new, topo.servers), REJOIN_TIMEOUT_S,
                            "the old master to rejoin as a replica")
        stop.wait(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    results = []
    for n, w in writers.items():
        holder = other if n == "other" else new
        with contextlib.closing(holder.client()) as survivor:
            results.append(result(w, "minority" if n == "a" else "majority", survivor.lrange(w.key, 0, -1), cut))
    a = results[0]
    refused = min((x.t_s for x in a.writes if x.t_s >= 0 and x.outcome == "refused"), default=float("nan"))
    run = MinorityRun(topo.node_timeout_ms, refused, promoted - cut, healed - cut, rejoined - cut, tuple(results))
    log.info("node timeout %d ms: window %.2f s, %d lost", run.node_timeout_ms, run.window_s, a.lost)
    return run


def _role(proc: RedisProcess) -> str:
    with contextlib.closing(proc.client()) as client:
        try:
            return str(client.info("replication").get("role"))
        except redis.RedisError:
            return "down"


def _rejoined(old: RedisProcess, new: RedisProcess, every: Sequence[RedisProcess]) -> bool:
    view = nodes_view(old) or []
    me = next((n for n in view if "myself" in n.flags), None)
    promoted = next((n for n in view if n.port == new.port), None)
    if me is None or promoted is None or me.master_id != promoted.node_id or _role(old) != "slave":
        return False
    with contextlib.closing(old.client()) as client, contextlib.suppress(redis.RedisError):
        if client.info("replication").get("master_link_status") != "up":
            return False
    return all((cluster_info(p) or {}).get("cluster_state") == "ok" for p in every)


def run_timeouts(run_dir: Path, node_timeouts_ms: Sequence[int] = NODE_TIMEOUTS_MS) -> list[MinorityRun]:
    """:func:`run_timeout` for each node timeout at once, each cluster in namespaces of its own."""
    netns.require()
    with ThreadPoolExecutor(max_workers=len(node_timeouts_ms)) as pool:
        futures = [pool.submit(run_timeout, Path(run_dir) / f"nt{ms}", ms) for ms in node_timeouts_ms]
        return [f.result() for f in futures]


def loss_table(runs: Sequence[MinorityRun]) -> list[dict[str, object]]:
    """One row per node timeout: writes the cut-off master acknowledged and lost, its window, the promotion."""
    return [
        {
            "cluster-node-timeout ms": run.node_timeout_ms,
            "acked after the cut": len(run.writer("a").acked_after(0.0)),
            "acked and lost": run.writer("a").lost,
            "window s": round(run.window_s, 2),
            "promoted s": round(run.promoted_s, 2),
            "two masters s": round(run.two_masters_s, 2),
            "other shard: failed writes": len(run.writer("other").failed_after(0.0)),  # from the cut on
            "lost on the majority": run.writer("b").lost + run.writer("other").lost,
        }
        for run in runs
    ]


def figure(runs: Sequence[MinorityRun], *, lang: str = "ru") -> go.Figure:
    """Acknowledged writes per client over time, one panel per node timeout; cut, promotion, heal marked.

    ``lang``: the words of the chart (``ru`` in the notebook, ``en`` in the lab's report).
    """
    words = CHART_WORDS[lang]
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True,
                        subplot_titles=[f"cluster-node-timeout {r.node_timeout_ms} {words['ms']}" for r in runs])
    colours = {"a": "#d62728", "b": "#1f77b4", "other": "#2ca02c"}
    names = {"a": words["a-cluster"], "b": words["b-cluster"], "other": words["other"]}
    for row, run in enumerate(runs, start=1):
        for w in reversed(run.writers):  # the cut-off master's line last, on top of the other shard's
            line = {"color": colours[w.name], "width": 3 if w.name == "a" else 1.5,
                    "dash": "dot" if w.name == "other" else "solid"}
            add_acked_traces(fig, w, row, name=names[w.name], line=line, lost_name=words["lost"])
        for at, key in ((0.0, "cut"), (run.promoted_s, "promoted"), (run.healed_s, "heal")):
            fig.add_vline(x=at, line_dash="dot", line_color="grey", annotation_text=words[key], row=row, col=1)
    fig.update_layout(height=300 * len(runs), title=words["minority-title"])
    fig.update_xaxes(title_text=words["x"], row=len(runs), col=1)
    fig.update_yaxes(title_text=words["y"])
    return fig
