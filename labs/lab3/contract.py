"""The worker contract: how the lab starts a worker (any language) and the producer.

A worker is a command (``python -m solutions.billing`` by default, or ``$WORKER`` split like
a shell would) followed by flags; the same values are also exported as environment
variables, so a worker may read either. ``--env-only`` leaves the flags out.
``labs/lab3/README.md`` states the whole contract (meanings, defaults, the ledger schema,
the one log line the lab reads); this table is its summary.

| flag | environment | value |
|---|---|---|
| ``--sentinel HOST:PORT`` (x3) | ``BILLING_SENTINELS=h:p,h:p,h:p`` | the sentinels |
| ``--master-name`` | ``BILLING_MASTER_NAME`` | ``mymaster`` |
| ``--cluster H:P`` (x6), ``--shards`` | ``BILLING_CLUSTER``, ``BILLING_SHARDS`` | on a cluster, not Sentinel |
| ``--stream``, ``--group``, ``--consumer`` | ``BILLING_STREAM``, ``BILLING_GROUP``, ``BILLING_CONSUMER`` | names |
| ``--ledger`` | ``BILLING_LEDGER`` | the SQLite file (tables ``charges``, ``applied_events``) |
| ``--dedupe`` | ``BILLING_DEDUPE`` | ``none`` / ``redis`` / ``sqlite`` |
| ``--handler-delay-ms``, ``--fail-every`` | ``BILLING_HANDLER_DELAY_MS``, ``BILLING_FAIL_EVERY`` | 50, 7 |
| ``--max-attempts`` | ``BILLING_MAX_ATTEMPTS`` | deliveries before the DLQ (5) |
| ``--min-idle-ms``, ``--claim-interval-ms`` | ``BILLING_MIN_IDLE_MS``, ``BILLING_CLAIM_INTERVAL_MS`` | rescuer |
| ``--block-ms``, ``--drain-timeout-s``, ``--metrics-interval-s`` | ``BILLING_BLOCK_MS`` ... | timings |

On SIGTERM the worker must stop reading, finish its in-flight work, ack only what it did,
write a line containing ``drain complete`` to stdout or stderr and exit 0.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labs.lab3.deployment import Deployment
from labs.lab3.settings import Lab3Settings

ROOT = Path(__file__).resolve().parents[2]
WORKER_VAR = "WORKER"
REFERENCE_WORKER = (sys.executable, "-m", "solutions.billing")
PRODUCER = (sys.executable, "-m", "solutions.producer")


@dataclass(frozen=True)
class WorkerSpec:
    """What to run: the command, and whether it takes flags (else only the environment)."""

    command: tuple[str, ...] = REFERENCE_WORKER
    flags: bool = True

    @classmethod
    def from_text(cls, text: str | None, *, flags: bool = True) -> WorkerSpec:
        """``None`` or '' gives the reference; else the command split like a shell would."""
        if not text:
            return cls(REFERENCE_WORKER, flags)
        return cls(tuple(shlex.split(text)), flags)

    @classmethod
    def from_env(cls) -> WorkerSpec:
        return cls.from_text(os.environ.get(WORKER_VAR))

    @property
    def label(self) -> str:
        if self.command == REFERENCE_WORKER:
            return "reference billing-worker (python -m solutions.billing)"
        return shlex.join(self.command)


@dataclass(frozen=True)
class WorkerConfig:
    """One worker process's names and paths (the addresses come from the :class:`Deployment`)."""

    stream: str
    group: str
    consumer: str
    ledger: Path
    dedupe: str


def worker_values(config: WorkerConfig, s: Lab3Settings) -> dict[str, str]:
    """The contract's values by flag name (the connection's apart: they come from the deployment)."""
    return {
        "stream": config.stream,
        "group": config.group,
        "consumer": config.consumer,
        "ledger": str(config.ledger),
        "dedupe": config.dedupe,
        "handler-delay-ms": str(s.handler_delay_ms),
        "fail-every": str(s.fail_every),
        "max-attempts": str(s.max_attempts),
        "min-idle-ms": str(s.min_idle_ms),
        "claim-interval-ms": str(s.claim_interval_ms),
        "block-ms": str(s.block_ms),
        "drain-timeout-s": str(s.drain_timeout_s),
        "metrics-interval-s": str(s.metrics_interval_s),
    }


def worker_argv(spec: WorkerSpec, site: Deployment, config: WorkerConfig, s: Lab3Settings) -> list[str]:
    """The command, then every flag of the contract (none with ``--env-only``)."""
    if not spec.flags:
        return list(spec.command)
    argv = list(spec.command)
    for name, value in [*site.worker_flags(), *worker_values(config, s).items()]:
        argv += [f"--{name}", value]
    return argv


def worker_env(site: Deployment, config: WorkerConfig, s: Lab3Settings) -> dict[str, str]:
    """The same values as ``BILLING_<FLAG>`` environment variables."""
    env = {f"BILLING_{name.upper().replace('-', '_')}": value for name, value in worker_values(config, s).items()}
    return {**site.worker_env(), **env}


def producer_argv(site: Deployment, stream: str, log: Path, s: Lab3Settings, *, wait: bool) -> list[str]:
    """``billing-producer`` at the lab's rate, re-sending what it could not confirm (``--resend``)."""
    argv = [*PRODUCER, *site.producer_flags(), "--stream", stream, "--rate", str(s.rate), "--log", str(log),
            "--resend", str(s.resend)]
    if wait:
        argv += ["--wait-replicas", "1", "--wait-timeout-ms", str(s.wait_timeout_ms)]
    return argv


def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a process (from the repository root) with stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
