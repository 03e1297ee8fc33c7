"""The bench's plan and its run: every measurement, interleaved, with targets attached."""

from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import redis
from rich.progress import Progress, TaskID

from labs.bench import cluster, memory, process_runs, producer, recovery, throughput
from labs.bench.results import Row
from labs.bench.shapes import DIAGNOSIS_SHAPES, SHAPES
from labs.bench.throughput import ROUND, Pairs, Run, gc_mode, timed
from labs.experiments import ceiling, worker_runs
from labs.launcher import topologies
from labs.launcher.cluster import ClusterTopology
from solutions.settings import Settings

log = logging.getLogger(__name__)

HANDLER_S = 0.05
FAILOVER_GAP_S = 0.5
RSS_GROWTH_MAX = 1.25


@dataclass(frozen=True)
class Plan:
    events: int
    reps: int
    parallelism: tuple[int, ...]
    concurrency_s: float
    producer_n: int
    latency_n: int
    failover_rounds: int
    memory_events: int
    cluster_shards: tuple[int, ...] = (1, 2, 3, 6)
    cluster_per_shard: int = 2_000  # events per shard in each throughput run
    cluster_kills: int = 3
    process_events: int = 100_000  # per run of the process rows (issue 32: 100k)
    process_reps: int = 3  # interleaved rounds of the process rows
    process_shapes: tuple[str, ...] = tuple(SHAPES)


FULL = Plan(25_000, 15, (8, 64, 256), 3.0, 20_000, 20_000, 3, 1_000_000)
TINY = Plan(2_000, 1, (8,), 0.5, 500, 300, 1, 0, cluster_shards=(1, 2), cluster_per_shard=200, cluster_kills=1,
            process_events=3_000, process_reps=1, process_shapes=("four fields", "+5 fields"))
# The process rows' consumers, in the order of a round: the raw loop first, each worker right after it.
PROCESS_TARGETS = {"none": 0.9, "sqlite": 0.7}
DEFAULTS_SHAPE = "four fields"  # the course defaults' price is shown on the producer's own shape


class Bench:
    def __init__(self, url: str, plan: Plan, workdir: Path, progress: Progress) -> None:
        self.url, self.plan, self.workdir, self.progress = url, plan, workdir, progress
        self.rows: list[Row] = []

    def _advance(self, task: TaskID) -> None:
        # Redrawn here only: a refresh thread would share the client's one pinned CPU with the runs.
        self.progress.advance(task)
        self.progress.refresh()

    def _stream(self, name: str) -> str:
        return f"bench:{name}"

    def _drop(self, stream: str) -> None:
        with redis.Redis.from_url(self.url) as client:
            client.delete(stream)

    async def _timed(self, name: str, run: Callable[[str], Awaitable[float]], n: int) -> Run:
        """Produce ``n`` events, run ``run`` over them (timed: msgs/s and CPU per message), drop them."""
        stream = self._stream(name)
        await asyncio.to_thread(ceiling.produce, self.url, stream, n)
        try:
            return await timed(run(stream), n)
        finally:
            await asyncio.to_thread(self._drop, stream)

    async def _worker_run(self, name: str, n: int, base: Settings) -> Run:
        return await self._timed(name, lambda stream: worker_runs.run_worker(replace(base, stream=stream), n), n)

    async def _round(self, n: int, ledger_tag: str, task: TaskID, pairs: dict[tuple[str, str], Pairs]) -> None:
        """One round: per ``(dedupe, GC mode)`` of :data:`~labs.bench.throughput.ROUND`, a ceiling
        run and right after it the worker, both in that GC mode (see :mod:`labs.bench.throughput`)."""
        for dedupe, mode in ROUND:
            with gc_mode(mode):
                ceiling_run = await self._timed("ceiling", lambda s: ceiling.ceiling(self.url, s, n), n)
                self._advance(task)
                ledger = self.workdir / f"ledger-{dedupe}-{mode}-{ledger_tag}.sqlite3"
                base = worker_runs.bench_settings(self.url, dedupe=dedupe, ledger=ledger, parallelism=100, count=100)
                worker_run = await self._worker_run(dedupe, n, base)
                self._advance(task)
            pair = pairs.setdefault((dedupe, mode), Pairs())
            pair.workers.append(worker_run)
            pair.ceilings.append(ceiling_run)

    async def throughput(self) -> None:
        """The worker with each dedupe and GC mode, each run paired with a ceiling run just before it.

        A short warm-up round first (imports, caches, the server), so that the first measured
        ceiling is not also the run that pays for them; then ``reps`` rounds. A worker's ratio
        is the median of its ``reps`` paired ratios.
        """
        n = self.plan.events
        task = self.progress.add_task("throughput", total=(self.plan.reps + 1) * 2 * len(ROUND))
        await self._round(max(1, n // 10), "warm-up", task, {})  # not kept
        pairs: dict[tuple[str, str], Pairs] = {}
        for rep in range(self.plan.reps):
            await self._round(n, str(rep), task, pairs)
        self.rows += throughput.rows_of(pairs)

    async def processes(self) -> None:
        """The process rows: per shape, the raw consumer process and right after it the
        ``billing-worker`` process with the throughput flags (``none``, ``sqlite``), and on the
        producer's shape with the course defaults too; ``process_reps`` interleaved rounds, each
        worker's ratio over the raw run of its own round and shape (see :mod:`labs.bench.process_runs`)."""
        plan = self.plan
        if not plan.process_reps or not plan.process_shapes:
            return
        tuned = [process_runs.worker(d) for d in PROCESS_TARGETS]
        defaults = [process_runs.worker(d, ()) for d in PROCESS_TARGETS]
        consumers = {shape: [process_runs.RAW, *tuned, *(defaults if shape == DEFAULTS_SHAPE else [])]
                     for shape in plan.process_shapes}
        task = self.progress.add_task("processes", total=plan.process_reps * sum(map(len, consumers.values())))
        drains: dict[tuple[str, str], list[process_runs.Drain]] = {}
        for rep in range(plan.process_reps):
            for k, (shape, round_consumers) in enumerate(consumers.items()):
                stream = self._stream("proc")
                groups = [f"r{rep}-s{k}-c{i}" for i in range(len(round_consumers))]  # a ledger of each run's own
                await asyncio.to_thread(process_runs.produce, self.url, stream, plan.process_events, shape, groups)
                try:
                    for consumer, group in zip(round_consumers, groups, strict=True):
                        drain = await asyncio.to_thread(process_runs.run, consumer, self.url, stream, group,
                                                        plan.process_events, self.workdir / "proc" / group)
                        drains.setdefault((shape, consumer.label), []).append(drain)
                        self._advance(task)
                finally:
                    await asyncio.to_thread(self._drop, stream)
        self.rows += _process_rows(consumers, drains) + _process_cpu_rows(consumers, drains)

    async def concurrency(self) -> None:
        """A 50 ms handler at each parallelism, against the ideal parallelism / 0.05 s."""
        task = self.progress.add_task("concurrency", total=len(self.plan.parallelism))
        for par in self.plan.parallelism:
            ideal = par / HANDLER_S
            n = int(ideal * self.plan.concurrency_s)
            ledger = self.workdir / f"ledger-par-{par}.sqlite3"
            settings = worker_runs.bench_settings(
                self.url, dedupe="none", ledger=ledger, parallelism=par, count=par, delay_ms=50
            )
            rate = (await self._worker_run(f"par{par}", n, settings)).rate
            row = Row("concurrency", f"50 ms handler, parallelism {par}", "msgs/s", [rate])
            row.ratio, row.ratio_of = rate / ideal, f"ideal {ideal:,.0f}/s"
            if par == 64:
                row.target, row.met = "≥ 0.9 of ideal", row.ratio >= 0.9
            self.rows.append(row)
            self._advance(task)

    def producer_figures(self) -> None:
        task = self.progress.add_task("producer", total=2 + 3)
        n = self.plan.producer_n
        one = Row("produce", "XADD one by one", "msgs/s", [producer.xadd_one_by_one(self.url, "bench:xadd1", n)])
        self._advance(task)
        piped = Row(
            "produce",
            f"XADD pipelined, batches of {producer.PIPELINE_BATCH}",
            "msgs/s",
            [producer.xadd_pipelined(self.url, "bench:xaddp", n)],
        )
        piped.ratio, piped.ratio_of = piped.median / one.median, "one by one"
        self._advance(task)
        self.rows += [one, piped]
        for label, stats in producer.latency_cases(self.url, "bench:latency", self.plan.latency_n).items():
            for name, value in (("p50", stats.p50_us), ("p99", stats.p99_us), ("p99.9", stats.p999_us)):
                self.rows.append(Row("XADD latency", f"{label}, client {name}", "µs", [value]))
            self.rows.append(Row("XADD latency", f"{label}, server usec_per_call", "µs", [stats.server_usec_per_call]))
            self._advance(task)

    async def failover(self) -> None:
        rounds = self.plan.failover_rounds
        if rounds == 0:
            return
        task = self.progress.add_task("failover", total=rounds)
        topo = topologies.on_free_ports("sentinel", self.workdir / "sentinel", down_after_ms=1000)
        worker_row = Row("failover", "worker: kill -9 of the master → first charge", "s")
        writer_row = Row("failover", "plain redis-py writer via Sentinel → first XADD", "s")
        promoted_row = Row("failover", "kill -9 → quorum reports the new master", "s")
        try:
            await asyncio.to_thread(topo.ensure)
            for i in range(rounds):
                got = await recovery.one_failover(topo, self.workdir / f"ledger-fo-{i}.sqlite3", f"bench:fo{i}")
                worker_row.values.append(got.worker_s)
                writer_row.values.append(got.writer_s)
                promoted_row.values.append(got.promoted_s)
                self._advance(task)
        finally:
            await asyncio.to_thread(topo.stop)
        gap = worker_row.median - writer_row.median
        worker_row.ratio, worker_row.ratio_of = gap, "after the writer"
        worker_row.target, worker_row.met = f"≤ writer + {FAILOVER_GAP_S} s", gap <= FAILOVER_GAP_S
        self.rows += [worker_row, writer_row, promoted_row]

    async def memory_run(self) -> None:
        n = self.plan.memory_events
        if n == 0:
            return
        task = self.progress.add_task(f"memory ({n:,} messages)", total=1)
        samples: list[float] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(memory.sample_rss(samples, stop))
        settings = worker_runs.bench_settings(
            self.url, dedupe="none", ledger=self.workdir / "ledger-mem.sqlite3", parallelism=100, count=100
        )
        try:
            rate = (await self._worker_run("memory", n, settings)).rate
        finally:
            stop.set()
            await sampler
        growth = memory.growth(samples)
        row = Row("memory", f"worker peak RSS over {n:,} messages", "MB", [max(samples)])
        row.ratio, row.ratio_of = growth, "end vs first fifth"
        row.target, row.met = f"flat (growth ≤ {RSS_GROWTH_MAX}×)", growth <= RSS_GROWTH_MAX
        row.note = f"{rate:,.0f} msgs/s"
        self.rows.append(row)
        self._advance(task)


    async def cluster(self) -> None:
        """Throughput against shards (5 ms handler and none) and kill -9 to the first charge, on a cluster."""
        if not self.plan.cluster_shards and not self.plan.cluster_kills:
            return
        task = self.progress.add_task("cluster", total=2 + self.plan.cluster_kills)
        topo = topologies.on_free_ports("cluster", self.workdir / "cluster")
        try:
            await asyncio.to_thread(topo.ensure)
            if self.plan.cluster_shards:
                for delay_ms in (5, 0):
                    points = await cluster.scaling(topo, self.workdir, stream=f"bench:shards{delay_ms}ms",
                                                   shard_counts=self.plan.cluster_shards,
                                                   per_shard=self.plan.cluster_per_shard, handler_delay_ms=delay_ms)
                    self.rows += _shard_rows(points, delay_ms)
                    self._advance(task)
            await self._cluster_kills(topo, task)
        finally:
            await asyncio.to_thread(topo.stop)

    async def _cluster_kills(self, topo: ClusterTopology, task: TaskID) -> None:
        rounds = self.plan.cluster_kills
        if rounds == 0:
            return
        worker_row = Row("cluster failover", "worker: kill -9 of a shard's master → first charge on that shard", "s")
        writer_row = Row("cluster failover", "raw redis-py RedisCluster writer → first XADD to that slot", "s")
        promoted_row = Row("cluster failover", "kill -9 → every node names the new master", "s")
        others_row = Row("cluster failover", "the other shards' longest pause in charging", "s")
        for i in range(rounds):
            got = await cluster.one_kill(topo, self.workdir / f"ledger-cluster-{i}.sqlite3", f"bench:ck{i}")
            worker_row.values.append(got.worker_s)
            writer_row.values.append(got.writer_s)
            promoted_row.values.append(got.promoted_s)
            others_row.values.append(got.others_gap_s)
            self._advance(task)
        gap = worker_row.median - writer_row.median
        worker_row.ratio, worker_row.ratio_of = gap, "after the writer"
        worker_row.target, worker_row.met = f"≤ writer + {FAILOVER_GAP_S} s", gap <= FAILOVER_GAP_S
        others_row.target, others_row.met = "< 1 s", others_row.median < 1.0
        self.rows += [worker_row, writer_row, promoted_row, others_row]


Drains = dict[tuple[str, str], list[process_runs.Drain]]  # (shape, consumer label) -> one per round


def _process_rows(consumers: dict[str, list[process_runs.Consumer]], drains: Drains) -> list[Row]:
    """Per shape: the raw row, then each worker with its paired ratios (same round, same shape)."""
    rows = []
    for shape, round_consumers in consumers.items():
        raw = [d.rate for d in drains[(shape, process_runs.RAW.label)]]
        rows.append(Row("process", f"{process_runs.RAW.label} · {shape}", "msgs/s", raw))
        for consumer in round_consumers[1:]:
            values = [d.rate for d in drains[(shape, consumer.label)]]
            row = Row("process", f"{consumer.label} · {shape}", "msgs/s", values)
            row.ratios = [w / r for w, r in zip(values, raw, strict=True)]
            row.ratio, row.ratio_of = statistics.median(row.ratios), "raw process (paired)"
            if shape in DIAGNOSIS_SHAPES:
                row.note = "diagnosis, no target: random event ids are the producer's choice (solutions.event_ids)"
            elif consumer.flags and consumer.dedupe in PROCESS_TARGETS:
                row.target = f"≥ {PROCESS_TARGETS[consumer.dedupe]}× raw"
                row.met = row.ratio >= PROCESS_TARGETS[consumer.dedupe]
            else:
                row.note = f"the course defaults; for throughput add {' '.join(process_runs.TUNED_FLAGS)}"
            rows.append(row)
    return rows


def _process_cpu_rows(consumers: dict[str, list[process_runs.Consumer]], drains: Drains) -> list[Row]:
    """Diagnosis: the same runs' CPU per message, the raw process's over each worker's as the ratio
    (paired by round), and how busy each was; only where every run gave a CPU figure (a long enough drain)."""
    rows = []
    for shape, round_consumers in consumers.items():
        raw = [d.cpu_us or 0.0 for d in drains[(shape, process_runs.RAW.label)]]
        for consumer in round_consumers:
            runs = drains[(shape, consumer.label)]
            cpu = [d.cpu_us or 0.0 for d in runs]
            if not all(raw) or not all(cpu):  # None (too short a drain) or 0 (no clock tick): no figure
                continue
            busy = statistics.median(d.busy or 0.0 for d in runs)  # CPU time over wall time
            row = Row("process CPU (diagnosis)", f"{consumer.label} · {shape}, CPU per message "
                      f"(busy {busy:.0%} of the drain)", "µs/msg", cpu)
            if consumer is not process_runs.RAW:
                row.ratios = [r / c for r, c in zip(raw, cpu, strict=True)]
                row.ratio, row.ratio_of = statistics.median(row.ratios), "raw process's CPU (paired)"
            rows.append(row)
    return rows


def _shard_rows(points: list[cluster.ThroughputPoint], delay_ms: int) -> list[Row]:
    """One row per number of shards; with a handler, each against ideal linear scaling."""
    rows = []
    one = points[0].rate
    for p in points:
        what = f"{delay_ms} ms handler" if delay_ms else "no handler"
        row = Row("cluster shards", f"{what}, {p.shards} shard(s), 4 handler slots each", "msgs/s", [p.rate])
        row.ratio, row.ratio_of = p.rate / (p.shards * one), "ideal: N × 1 shard"
        rows.append(row)
    return rows


async def run_all(url: str, plan: Plan, progress: Progress) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        bench = Bench(url, plan, Path(tmp), progress)
        await bench.processes()
        await bench.throughput()
        await bench.concurrency()
        await asyncio.to_thread(bench.producer_figures)
        await bench.memory_run()
        await bench.failover()
        await bench.cluster()
        return bench.rows
