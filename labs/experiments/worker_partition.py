"""The billing worker across a real partition: split brain under Sentinel, seen from the ledger.

A ``sentinel`` topology with ``--netns`` (:mod:`labs.launcher.netns`). On the old master's side:
the producer (``billing-producer --redis-url`` of the master: the address it had) and worker ``a``;
on the other side: the replica, the three sentinels and worker ``b``. Both workers go through
Sentinel (``--sentinel``) and share one SQLite ledger, the business store both sides still reach.
The producer sends faster than the two workers charge, so a backlog waits when the cut comes.

During the cut, worker ``a`` goes on charging from the old master: the backlog and the new
entries the producer writes there. After the promotion worker ``b`` charges the same backlog
from the new master, whose group state is the one replicated before the cut. At the heal the
old master is demoted and drops what it took alone; worker ``a`` follows Sentinel to the new
master by itself. With ``--dedupe sqlite`` no event is charged twice; with ``none`` the backlog
both sides charged is counted twice. Every entry that survived in Redis must be charged.

Every figure comes from records the workers do not write: the producer's log, the ledger, the
surviving stream. Tests in ``tests/test_worker_partition.py``; lab 3's ``--mode partition``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import redis

from labs.experiments.partition_writes import wait_for
from labs.experiments.split_brain import caught_up, linked_replica
from labs.experiments.worker_procs import GROUP, ROOT, charges, flags, producer_command, worker_command
from labs.launcher import netns, sentinel, topologies
from labs.launcher.process import RedisProcess
from labs.launcher.sentinel import MASTER_NAME
from labs.launcher.topology import Topology

log = logging.getLogger(__name__)

STREAM = "orders"
DRAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WorkerPartition:
    """One run: what the producer confirmed, what survived in Redis, what the ledger charged."""

    dedupe: str
    confirmed: int  # events the producer's log says Redis confirmed
    confirmed_gone: int  # ... whose entry is not in the surviving stream (the split brain's loss)
    survived: int  # entries in the stream on the master after the heal
    survived_uncharged: int  # ... never charged: lost events (must be 0)
    charged: int  # distinct events in the ledger
    duplicated: int  # events charged more than once
    charged_gone: int  # events charged from entries that vanished with the old master
    promoted_s: float
    healed_s: float
    demoted_s: float
    drained_s: float  # from the cut until the surviving stream's group had nothing pending or undelivered
    downtime_s: float  # the longest gap between two charges (any worker) from the cut until drained
    restarts: int  # worker processes that exited before the end (0: no restart needed)
    exit_codes: tuple[int, ...]
    log_lines: dict[str, int]  # lines each worker logged during the whole run
    warning_lines: dict[str, int]  # ... of them WARNING or ERROR: what an operator would be paged by


def _worker(topo: Topology, fabric: netns.Fabric, side: str, run_dir: Path, dedupe: str) -> subprocess.Popen[bytes]:
    watchers: list[str] = []
    for host, port in topo.addresses().sentinels:
        watchers += ["--sentinel", f"{host}:{port}"]
    args = flags(master_name=MASTER_NAME, stream=STREAM, group=GROUP, consumer=f"worker-{side}",
                 ledger=run_dir / "ledger.sqlite3", dedupe=dedupe, handler_delay_ms=50, parallelism=2, count=8,
                 block_ms=200, metrics_interval_s=60, min_idle_ms=5000, claim_interval_ms=2000)
    with (run_dir / f"worker-{side}.log").open("wb") as out:
        return subprocess.Popen(fabric.exec_argv(f"client-{side}", [*worker_command(), *watchers, *args]),
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def run_dedupe(run_dir: Path, dedupe: str, *, partition_s: float = 7.0, rate: float = 150.0) -> WorkerPartition:
    """One sentinel topology in namespaces, two workers, a producer, a cut and a heal; everything removed after."""
    run_dir.mkdir(parents=True, exist_ok=True)
    topo = topologies.on_free_ports("sentinel", run_dir / "topology", netns=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        topo.ensure()
        fabric = topo.fabric
        assert fabric is not None
        fabric.add("client-a")
        fabric.add("client-b")
        old, replica = topo.servers
        workers = [_worker(topo, fabric, side, run_dir, dedupe) for side in ("a", "b")]
        producer_args = flags(redis_url=f"redis://{old.host}:{old.port}/0", stream=STREAM, rate=rate,
                              log=run_dir / "producer.jsonl")
        with (run_dir / "producer.log").open("wb") as out:
            producer = subprocess.Popen(fabric.exec_argv("client-a", [*producer_command(), *producer_args]),
                                        stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        procs = [*workers, producer]
        ledger = run_dir / "ledger.sqlite3"
        wait_for(lambda: {c.consumer for c in charges(ledger)} >= {"worker-a", "worker-b"}, 30,
                 "both workers to charge")
        time.sleep(1.5)  # a backlog builds up: the producer sends faster than both workers charge
        cut, cut_unix = time.monotonic(), time.time()
        fabric.partition([old.name, "client-a"], [replica.name, *(s.name for s in topo.sentinels), "client-b"])
        promoted = wait_for(lambda: sentinel.role(replica) == "master", 20, "the sentinels to promote the replica")
        time.sleep(max(0.0, cut + partition_s - time.monotonic()))
        producer.send_signal(signal.SIGINT)  # the producer stops with the heal: what follows is recovery only
        healed = time.monotonic()
        fabric.heal()
        demoted = wait_for(lambda: linked_replica(old), 45, "Sentinel to demote the old master")
        wait_for(lambda: caught_up(replica, old), 10, "the old master to resync")
        drained = wait_for(lambda: _drained(replica), DRAIN_TIMEOUT_S, "the workers to drain the surviving stream")
        producer.wait(10)
        restarts = sum(1 for w in workers if w.poll() is not None)
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = tuple(w.wait(30) for w in workers)
        with contextlib.closing(replica.client()) as survivor:
            kept = _event_ids(survivor)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        topo.stop()
    times = (promoted - cut, healed - cut, demoted - cut, drained - cut)
    return _tally(run_dir, dedupe, kept, restarts, codes, times, cut_unix)


def _drained(master: RedisProcess) -> bool:
    with contextlib.closing(master.client()) as client:
        try:
            groups = client.xinfo_groups(STREAM)
        except redis.RedisError:
            return False
    group = next((g for g in groups if str(g["name"]) == GROUP), None)
    return group is not None and int(group["pending"]) == 0 and int(group.get("lag") or 0) == 0


def _event_ids(client: redis.Redis) -> set[str]:
    entries = client.xrange(STREAM) or []  # XRANGE answers an array, never nil, and every entry its fields
    return {str((fields or {}).get("event_id", "")) for _, fields in entries}


def _tally(run_dir: Path, dedupe: str, kept: set[str], restarts: int, codes: tuple[int, ...],
           times: tuple[float, float, float, float], cut_unix: float) -> WorkerPartition:
    confirmed = set()
    for line in (run_dir / "producer.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["status"] == "confirmed":
            confirmed.add(str(record["event_id"]))
    rows = charges(run_dir / "ledger.sqlite3")
    per_event = Counter(c.event_id for c in rows)
    moments = [cut_unix, *sorted(c.charged_at for c in rows if c.charged_at >= cut_unix), cut_unix + times[3]]
    downtime_s = max(b - a for a, b in itertools.pairwise(moments))
    texts = {side: (run_dir / f"worker-{side}.log").read_text(errors="replace").splitlines() for side in "ab"}
    logs = {side: len(lines) for side, lines in texts.items()}
    warnings = {side: sum(1 for x in lines if " WARNING " in x or " ERROR " in x) for side, lines in texts.items()}
    run = WorkerPartition(
        dedupe=dedupe, confirmed=len(confirmed), confirmed_gone=len(confirmed - kept), survived=len(kept),
        survived_uncharged=len(kept - set(per_event)), charged=len(per_event),
        duplicated=sum(1 for n in per_event.values() if n > 1), charged_gone=len(set(per_event) - kept),
        promoted_s=times[0], healed_s=times[1], demoted_s=times[2], drained_s=times[3], downtime_s=downtime_s,
        restarts=restarts,
        exit_codes=codes, log_lines=logs, warning_lines=warnings,
    )
    log.info("worker across a partition (%s): %s", dedupe, run)
    return run


def run_both(run_dir: Path, dedupes: tuple[str, ...] = ("sqlite", "none"), **kwargs: float) -> list[WorkerPartition]:
    """:func:`run_dedupe` for each strategy at once, each in namespaces of its own."""
    netns.require()
    with ThreadPoolExecutor(max_workers=len(dedupes)) as pool:
        futures = [pool.submit(run_dedupe, Path(run_dir) / d, d, **kwargs) for d in dedupes]
        return [f.result() for f in futures]
