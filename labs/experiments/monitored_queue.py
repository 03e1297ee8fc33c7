"""A billing queue under monitoring: workers with /metrics registered in Prometheus, a producer, a quiet stream.

The faults of notebook 10 need a queue that Prometheus watches from both sides: Redis (the
exporter's stream metrics) and the workers (their ``/metrics``, found through the add-on's
file-based service discovery). :class:`MonitoredQueue` starts that on a ``sentinel`` topology:

- ``n_workers`` ``billing-worker`` processes through Sentinel (``--metrics-port`` on a free
  port each, registered with :meth:`Monitoring.register_worker`), with the lab's short timings
  (block 500 ms, min idle 2 s, a rescue round every 0.5 s: the production values / 60, like the
  rules' lab copy);
- a ``billing-producer`` at ``rate`` messages per second, through Sentinel;
- a quiet stream ``<prefix>quiet:orders``: one entry, read and acked by the group's only consumer,
  which then goes idle, and no traffic since: the classic false alarm of a consumer-idle rule.
  (An ``XREADGROUP`` that finds nothing creates no consumer, hence the one entry.)

:meth:`stop_workers` is the fault (SIGTERM: the workers drain and exit, their targets stay
registered, so ``up`` turns 0); :meth:`close` stops everything and unregisters the workers.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from labs.experiments import worker_procs
from labs.experiments.worker_procs import WorkerProcess
from labs.launcher.monitoring import Monitoring
from labs.launcher.ports import free_port
from labs.launcher.topology import Topology
from labs.launcher.worker_targets import WorkerTarget
from labs.polling import wait_until

GROUP = worker_procs.GROUP
LAB_TIMINGS = {"block_ms": 500, "min_idle_ms": 2000, "claim_interval_ms": 500, "metrics_interval_s": 1,
               "handler_delay_ms": 5}
START_TIMEOUT_S = 20.0


@dataclass
class MonitoredQueue:
    """The processes and names of one monitored queue (build it with :meth:`start`)."""

    mon: Monitoring
    topo: Topology
    stream: str
    quiet_stream: str
    home: Path
    workers: list[WorkerProcess] = field(default_factory=list)
    producer: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(
        cls, mon: Monitoring, topo: Topology, home: Path, *, prefix: str, n_workers: int = 2, rate: float = 20.0
    ) -> MonitoredQueue:
        """Start workers and producer on ``topo`` (a sentinel topology), wait until the workers consume."""
        sentinel = f"127.0.0.1:{topo.sentinels[0].port}"
        queue = cls(mon, topo, f"{prefix}orders", f"{prefix}quiet:orders", home)
        home.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(redis.Redis.from_url(queue.url, decode_responses=True)) as client:
            client.delete(queue.stream, f"{queue.stream}:dlq", queue.quiet_stream)
            client.xgroup_create(queue.stream, GROUP, id="$", mkstream=True)
            client.xgroup_create(queue.quiet_stream, GROUP, id="$", mkstream=True)
            entry = client.xadd(queue.quiet_stream, {"type": "order.paid", "order_id": "quiet", "amount": "1.00"})
            client.xreadgroup(GROUP, "idle-consumer", {queue.quiet_stream: ">"}, count=1)
            client.xack(queue.quiet_stream, GROUP, entry)
        try:
            for i in range(n_workers):
                queue._start_worker(f"{prefix.replace(':', '-').strip('-')}-w{i}", sentinel)
            flags = worker_procs.flags(sentinel=sentinel, stream=queue.stream, rate=rate)
            argv = [*worker_procs.producer_command(), *flags]
            with (home / "producer.log").open("ab") as out:
                queue.producer = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=worker_procs.ROOT)
            queue.wait_consuming()
        except BaseException:
            queue.close()
            raise
        return queue

    @property
    def url(self) -> str:
        """The current master (it changes with every failover)."""
        return self.topo.url

    def _start_worker(self, consumer: str, sentinel: str) -> None:
        port = free_port()
        worker = WorkerProcess.start(
            self.url, self.stream, self.home / "ledger.sqlite3", consumer, self.home,
            sentinel=sentinel, metrics_port=port, **LAB_TIMINGS,
        )
        self.workers.append(worker)
        self.mon.register_worker(WorkerTarget(name=consumer, port=port, stream=self.stream, group=GROUP,
                                              consumer=consumer))

    def consumed(self) -> int:
        """Entries the group has read so far (XINFO GROUPS ``entries-read``)."""
        with contextlib.closing(redis.Redis.from_url(self.url, decode_responses=True)) as client:
            groups = client.xinfo_groups(self.stream)
        return int(next((g.get("entries-read") or 0 for g in groups if g["name"] == GROUP), 0))

    def wait_consuming(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll until every worker runs and the group has read entries (the producer writes)."""
        wait_until(lambda: all(w.alive() for w in self.workers) and self.consumed() > 0, timeout_s,
                   f"the workers of {self.stream} to consume", 0.2)

    def stop_workers(self) -> float:
        """The fault: SIGTERM every worker (they drain and exit; their targets stay); the time it began."""
        fault_at = time.time()
        for worker in self.workers:
            worker.stop()
        return fault_at

    def close(self) -> None:
        """Stop the producer and the workers, unregister the workers, delete the streams."""
        if self.producer is not None and self.producer.poll() is None:
            self.producer.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.producer.wait(10)
            if self.producer.poll() is None:
                self.producer.kill()
        for worker in self.workers:
            worker.kill()
            self.mon.unregister_worker(worker.consumer)
        with contextlib.suppress(redis.RedisError), contextlib.closing(redis.Redis.from_url(self.url)) as client:
            client.delete(self.stream, f"{self.stream}:dlq", self.quiet_stream)
