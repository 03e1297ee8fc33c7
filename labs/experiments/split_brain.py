"""Split brain under Sentinel: the master cut off with a client, the replica promoted, the old master's writes lost.

The topology is ``sentinel`` with ``--netns`` (:mod:`labs.launcher.netns`): the master and client
``a`` on one side; the replica, the three sentinels and client ``b`` on the other. Client ``a`` holds
a plain connection to the master (what a Sentinel client caches; it cannot reach a sentinel any
more), client ``b`` goes through the sentinels. For ``partition_s`` the sides cannot exchange a
packet; the sentinels promote the replica after ``down-after-milliseconds``; then the heal, and
Sentinel turns the old master into a replica of the new one (``+convert-to-slave`` about 8-10 s
later), which throws away everything it acknowledged after the cut.

What bounds the loss is the old master's own guard: ``min-replicas-to-write N`` refuses writes
once fewer than N replicas acknowledged the replication stream within ``min-replicas-max-lag``
seconds (replicas send ``REPLCONF ACK`` every second; the master recounts every second), so its
window is about the lag plus one or two seconds. With 0 (the default) nothing refuses until the
demotion. Client ``a2`` (only in the unguarded run) sends ``WAIT 1 wait_ms`` after each write and
counts a write as confirmed only when a replica has it: the client's own answer, paid in latency.

:func:`run_guards` runs one topology per guard side by side (each in namespaces of its own), so the
three cases take the time of one. Tests in ``tests/test_split_brain.py``; notebook 03.
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
from typing import TypedDict, Unpack

import plotly.graph_objects as go
import redis
from plotly.subplots import make_subplots
from redis.backoff import NoBackoff
from redis.retry import Retry

from labs.experiments.partition_writes import CHART_WORDS, Writer, WriterResult, add_acked_traces, result, wait_for
from labs.launcher import netns, sentinel, topologies
from labs.launcher.process import RedisProcess
from labs.launcher.sentinel import MASTER_NAME, Timeouts, master_client
from labs.launcher.topology import Topology

log = logging.getLogger(__name__)

SOCKET_TIMEOUT_S = 0.5
_SIDES = {"a": "old master's side", "b": "sentinels' side"}
DEMOTION_TIMEOUT_S = 45.0  # the heal, then Sentinel's 8 s wait and its next INFO (10 s period)


@dataclass(frozen=True)
class Guard:
    """The old master's ``min-replicas-to-write`` and ``min-replicas-max-lag`` (s) in one run."""

    min_replicas: int
    max_lag_s: int = 10

    @property
    def label(self) -> str:
        if self.min_replicas == 0:
            return "min-replicas-to-write 0"
        return f"min-replicas-to-write {self.min_replicas}, max-lag {self.max_lag_s} s"

    def config(self) -> tuple[str, ...]:
        return (f"min-replicas-to-write {self.min_replicas}", f"min-replicas-max-lag {self.max_lag_s}")


GUARDS = (Guard(0), Guard(1, 1), Guard(1, 4))


@dataclass(frozen=True)
class SplitBrainRun:
    """One partition: times in s from the cut, and each client's writes against what survived."""

    guard: Guard
    promoted_s: float  # the replica reports role master
    healed_s: float
    demoted_s: float  # the old master reports role slave with its link up
    writers: tuple[WriterResult, ...]
    wait_ms: int

    def writer(self, name: str) -> WriterResult:
        return next(w for w in self.writers if w.name == name)

    @property
    def isolated(self) -> WriterResult:
        """Client ``a``: the one writing to the old master on its side."""
        return self.writer("a")

    @property
    def window_s(self) -> float:
        """How long the isolated old master kept acknowledging after the cut (its last ack, s from the cut)."""
        return self.isolated.last_ack_s


def _plain(host: str, port: int) -> redis.Redis:
    return redis.Redis(host=host, port=port, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S,
                       retry=Retry(NoBackoff(), 0))


def _through_sentinels(sentinels: Sequence[tuple[str, int]]) -> redis.Redis:
    timeouts = Timeouts(socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S)
    return master_client(sentinels, MASTER_NAME, sentinel_kwargs=timeouts, retry=Retry(NoBackoff(), 0), **timeouts)


def run_guard(
    run_dir: Path,
    guard: Guard,
    *,
    down_after_ms: int = 1000,
    partition_s: float = 7.0,
    interval_ms: int = 10,
    wait_ms: int = 100,
    with_wait: bool = False,
) -> SplitBrainRun:
    """One sentinel topology in namespaces, one partition and heal; everything stopped and removed afterwards."""
    topo = topologies.on_free_ports("sentinel", run_dir, down_after_ms=down_after_ms, netns=True,
                                    extra_config=guard.config())
    try:
        topo.ensure()
        return _partitioned(topo, guard, partition_s, interval_ms / 1000, wait_ms, with_wait)
    finally:
        topo.stop()


def _partitioned(
    topo: Topology, guard: Guard, partition_s: float, interval_s: float, wait_ms: int, with_wait: bool
) -> SplitBrainRun:
    fabric = topo.fabric
    assert fabric is not None
    old, replica = topo.servers
    side_a, side_b = fabric.add("client-a"), fabric.add("client-b")
    writers = {"a": Writer("a", "sb:a", interval_s), "b": Writer("b", "sb:b", interval_s)}
    connects = {"a": partial(_plain, old.host, old.port), "b": partial(_through_sentinels, topo.addresses().sentinels)}
    where = {"a": side_a.ns, "b": side_b.ns}
    if with_wait:
        writers["a2"] = Writer("a2", "sb:a2", interval_s, wait_ms=wait_ms)
        connects["a2"], where["a2"] = connects["a"], side_a.ns
    stop = threading.Event()
    threads = [netns.run_thread(where[n], partial(w.run, connects[n], stop), f"writer-{n}") for n, w in writers.items()]
    try:
        wait_for(lambda: all(w.count("acked") >= 50 for w in writers.values()), 20, "every client to write")
        cut = time.monotonic()
        fabric.partition([old.name, "client-a"], [replica.name, *(s.name for s in topo.sentinels), "client-b"])
        promoted = wait_for(lambda: sentinel.role(replica) == "master", 20, "the sentinels to promote the replica")
        stop.wait(max(0.0, cut + partition_s - time.monotonic()))
        healed = time.monotonic()
        fabric.heal()
        demoted = wait_for(lambda: linked_replica(old), DEMOTION_TIMEOUT_S, "Sentinel to demote the old master")
        wait_for(lambda: caught_up(replica, old), 10, "the old master to resync")
        stop.wait(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    with contextlib.closing(replica.client()) as survivor:
        results = tuple(
            result(w, _SIDES[n[0]], survivor.lrange(w.key, 0, -1), cut) for n, w in writers.items()
        )
    run = SplitBrainRun(guard, promoted - cut, healed - cut, demoted - cut, results, wait_ms)
    log.info("%s: window %.1f s, %d of %d acked lost", guard.label, run.window_s, run.isolated.lost,
             run.isolated.acked)
    return run


def linked_replica(proc: RedisProcess) -> bool:
    with contextlib.closing(proc.client()) as client:
        try:
            info = client.info("replication")
        except redis.RedisError:
            return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


def caught_up(master: RedisProcess, replica: RedisProcess) -> bool:
    with contextlib.closing(master.client()) as m, contextlib.closing(replica.client()) as r:
        try:
            return int(m.info("replication")["master_repl_offset"]) <= int(r.info("replication")["slave_repl_offset"])
        except (redis.RedisError, KeyError):
            return False


class RunOptions(TypedDict, total=False):
    """:func:`run_guard`'s timings, passed on by :func:`run_guards`."""

    down_after_ms: int
    partition_s: float
    interval_ms: int
    wait_ms: int


def run_guards(run_dir: Path, guards: Sequence[Guard] = GUARDS, **kwargs: Unpack[RunOptions]) -> list[SplitBrainRun]:
    """:func:`run_guard` for each guard at once, each topology in namespaces of its own; the unguarded one adds WAIT."""
    netns.require()
    with ThreadPoolExecutor(max_workers=len(guards)) as pool:
        futures = [
            pool.submit(run_guard, Path(run_dir) / f"guard{i}", guard, with_wait=guard.min_replicas == 0,
                        **kwargs)
            for i, guard in enumerate(guards)
        ]
        return [f.result() for f in futures]


def loss_table(runs: Sequence[SplitBrainRun]) -> list[dict[str, object]]:
    """One row per guard (and one for the WAIT client): acknowledged writes lost and the measured window."""
    rows: list[dict[str, object]] = []
    for run in runs:
        a = run.isolated
        bound = "until the demotion" if run.guard.min_replicas == 0 else f"max-lag {run.guard.max_lag_s} s + 1-2 s"
        rows.append({
            "setting": run.guard.label, "client": "a (plain)", "acked after the cut": len(a.acked_after(0.0)),
            "acked and lost": a.lost, "window s": round(run.window_s, 2), "bound": bound,
            "promoted s": round(run.promoted_s, 2), "demoted s": round(run.demoted_s, 2),
        })
        if any(w.name == "a2" for w in run.writers):
            a2 = run.writer("a2")
            rows.append({
                "setting": run.guard.label, "client": f"a2 (WAIT 1 {run.wait_ms} ms)",
                "acked after the cut": len(a2.acked_after(0.0)), "acked and lost": a2.lost,
                "window s": round(a2.last_ack_s, 2), "bound": "a replica must have it",
                "promoted s": round(run.promoted_s, 2), "demoted s": round(run.demoted_s, 2),
            })
    return rows


def wait_cost(run: SplitBrainRun) -> dict[str, float | None]:
    """Median latency (ms) of the plain and the WAIT client before the cut and during it."""
    a, a2 = run.isolated, run.writer("a2")
    return {
        "plain before": a.median_latency_ms(-10, 0), "WAIT before": a2.median_latency_ms(-10, 0),
        "plain during": a.median_latency_ms(0, run.healed_s), "WAIT during": a2.median_latency_ms(0, run.healed_s),
    }


def figure(runs: Sequence[SplitBrainRun], *, lang: str = "ru") -> go.Figure:
    """Acknowledged writes per side over time, one panel per guard; lost ones marked; cut, promotion, heal, demotion.

    ``lang``: the words of the chart (``ru`` in the notebook, ``en`` in the lab's report).
    """
    words = CHART_WORDS[lang]
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True, subplot_titles=[r.guard.label for r in runs],
                        vertical_spacing=0.08)
    colours = {"a": "#d62728", "a2": "#ff7f0e", "b": "#1f77b4"}
    for row, run in enumerate(runs, start=1):
        for w in run.writers:
            add_acked_traces(fig, w, row, name=words.get(w.name, f"{w.name}: {w.side}"),
                             line={"color": colours.get(w.name)}, lost_name=words["lost"])
        for at, key in ((0.0, "cut"), (run.promoted_s, "promoted"), (run.healed_s, "heal"), (run.demoted_s, "demoted")):
            fig.add_vline(x=at, line_dash="dot", line_color="grey", annotation_text=words[key], row=row, col=1)
    fig.update_layout(height=260 * len(runs), title=words["split-title"])
    fig.update_xaxes(title_text=words["x"], row=len(runs), col=1)
    fig.update_yaxes(title_text=words["y"])
    return fig
