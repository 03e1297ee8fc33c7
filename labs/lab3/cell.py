"""One cell of the lab: a worker x mode x dedupe strategy on a stream of its own, with its processes.

A cell owns a stream (``lab3:<run>:<cell>:orders``), its group ``billing``, its DLQ
``<stream>:dlq``, a SQLite ledger, a producer and the workers ``billing-1..N``. The cells
of one phase run at the same time on the same topology, so one fault hits them all alike;
with several workers under test (``--worker`` given more than once), each gets cells of its own.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from labs.lab3.contract import WorkerConfig, WorkerSpec, producer_argv, spawn, worker_argv, worker_env
from labs.lab3.deployment import Deployment
from labs.lab3.record import drain_lines
from labs.lab3.settings import Lab3Settings

GROUP = "billing"
STOP_MARGIN_S = 10.0  # beyond the drain timeout, before a worker that ignores SIGTERM gets SIGKILL


@dataclass
class Exit:
    """How a worker process ended: when, by which signal, with which code, and whether it wrote
    a ``drain complete`` line during this life."""

    consumer: str
    signal: str
    code: int | None
    at: float
    log: str
    drain_logged: bool = False


@dataclass
class Cell:
    """A worker x mode x strategy (x WAIT) cell and the processes it runs."""

    mode: str
    strategy: str
    wait: bool
    run_id: str
    home: Path
    site: Deployment
    spec: WorkerSpec
    settings: Lab3Settings
    worker: str = ""
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    producer: subprocess.Popen[bytes] | None = None
    exits: list[Exit] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)
    log_offsets: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        prefix = f"{self.worker}-" if self.worker else ""
        return f"{prefix}{self.mode}{'-wait' if self.wait else ''}-{self.strategy}"

    @property
    def variant(self) -> str:
        """The mode as the report names it: ``failover`` and ``failover+wait`` are two rows."""
        return f"{self.mode}+wait" if self.wait else self.mode

    @property
    def stream(self) -> str:
        return f"lab3:{self.run_id}:{self.name}:orders"

    @property
    def dlq(self) -> str:
        return f"{self.stream}:dlq"

    @property
    def ledger(self) -> Path:
        return self.home / "ledger.sqlite3"

    @property
    def sent_log(self) -> Path:
        return self.home / "producer.jsonl"

    def worker_log(self, consumer: str) -> Path:
        return self.home / f"{consumer}.log"

    def start_worker(self, consumer: str) -> None:
        config = WorkerConfig(self.stream, GROUP, consumer, self.ledger, self.strategy)
        argv = worker_argv(self.spec, self.site, config, self.settings)
        log = self.worker_log(consumer)
        self.starts[consumer] = self.starts.get(consumer, 0) + 1
        self.log_offsets[consumer] = log.stat().st_size if log.exists() else 0
        self.workers[consumer] = spawn(argv, log, worker_env(self.site, config, self.settings))

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        for consumer in self.settings.consumers:
            self.start_worker(consumer)

    def start_producer(self) -> None:
        argv = producer_argv(self.site, self.stream, self.sent_log, self.settings, wait=self.wait)
        self.producer = spawn(argv, self.home / "producer.log")

    def signal_producer(self, sig: int) -> None:
        if self.producer is not None and self.producer.poll() is None:
            self.producer.send_signal(sig)

    def stop_producer(self) -> None:
        if self.producer is not None:
            _stop(self.producer, signal.SIGINT, self.settings.drain_timeout_s + STOP_MARGIN_S)

    def signal_worker(self, consumer: str, sig: int = signal.SIGTERM) -> None:
        proc = self.workers[consumer]
        if proc.poll() is None:
            proc.send_signal(sig)

    def running(self, consumer: str) -> bool:
        proc = self.workers.get(consumer)
        return proc is not None and proc.poll() is None

    def reap(self, consumer: str, sig_name: str, timeout_s: float | None = None) -> Exit:
        """Wait for one worker to exit (SIGKILL after the drain timeout and a margin) and record how it ended."""
        proc = self.workers[consumer]
        wait_s = timeout_s if timeout_s is not None else self.settings.drain_timeout_s + STOP_MARGIN_S
        try:
            code: int | None = proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            code, sig_name = None, f"{sig_name}, then SIGKILL after {wait_s:.0f} s"
        log = self.worker_log(consumer)
        drained = drain_lines(log, self.log_offsets.get(consumer, 0)) > 0
        done = Exit(consumer, sig_name, code, time.time(), log.name, drained)
        self.exits.append(done)
        return done

    def stop_workers(self) -> None:
        """SIGTERM to every running worker, then wait for each (the ordinary end of a cell)."""
        running = [c for c in self.workers if self.running(c)]
        for consumer in running:
            self.signal_worker(consumer)
        for consumer in running:
            self.reap(consumer, "SIGTERM")

    def kill_all(self) -> None:
        """SIGKILL to whatever of this cell's processes still runs (cleanup after an error)."""
        for proc in [*self.workers.values(), *([self.producer] if self.producer else [])]:
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)


def _stop(proc: subprocess.Popen[bytes], sig: int, timeout_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
