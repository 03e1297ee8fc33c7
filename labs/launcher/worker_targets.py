"""The billing workers Prometheus scrapes: one file-based service discovery file per worker.

Prometheus watches ``<run_dir>/monitoring/workers/*.json`` (``file_sd_configs``) and picks up a
file written or removed within seconds, without a reload. Each file names one worker's
``/metrics`` address and the labels ``stream``, ``group`` and ``consumer`` (the same labels the
worker puts on its own series, so the job scrapes with ``honor_labels``), which is what lets the
``BillingWorkerDown`` alert pair a dead endpoint (``up == 0``) with its group's backlog.

A worker that dies stays registered on purpose: its ``up`` turns 0 and the alert can fire.
A worker stopped on purpose is unregistered first (:func:`unregister`).

:func:`discover` finds running ``billing-worker`` processes started with ``--metrics-port``
whose Redis (``--redis-url`` or ``--sentinel``) is one of the given ports, from their command
lines in ``/proc``; ``make up-monitoring`` and ``make status`` register what it finds.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULTS = {"stream": "orders", "group": "billing"}
_WORKER_MARKERS = ("solutions.billing", "billing-worker")
_PORT_IN = re.compile(r":(\d+)(?:/|$)")


@dataclass(frozen=True, kw_only=True)
class WorkerTarget:
    """One worker's metrics endpoint on 127.0.0.1 and its labels."""

    name: str
    port: int
    stream: str = "orders"
    group: str = "billing"
    consumer: str = ""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"worker name {self.name!r}: use letters, digits, '.', '_' or '-'")
        if not 0 < self.port < 65536:
            raise ValueError(f"worker {self.name}: bad metrics port {self.port}")

    def sd_entry(self) -> list[dict[str, object]]:
        labels = {"stream": self.stream, "group": self.group, "worker": self.name}
        if self.consumer:
            labels["consumer"] = self.consumer
        return [{"targets": [f"127.0.0.1:{self.port}"], "labels": labels}]


def register(workers_dir: Path, target: WorkerTarget) -> Path:
    """Write (atomically: a rename) the worker's service discovery file; its path."""
    workers_dir.mkdir(parents=True, exist_ok=True)
    path = workers_dir / f"{target.name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(target.sd_entry(), indent=1) + "\n")
    tmp.replace(path)
    return path


def unregister(workers_dir: Path, name: str) -> bool:
    """Remove a worker's file; True when there was one."""
    path = workers_dir / f"{name}.json"
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def registered(workers_dir: Path) -> list[str]:
    """The names of the registered workers."""
    return sorted(p.stem for p in workers_dir.glob("*.json")) if workers_dir.exists() else []


def parse_worker_argv(argv: list[str], pid: int, redis_ports: set[int]) -> WorkerTarget | None:
    """A :class:`WorkerTarget` for a billing-worker command line that serves metrics for these ports."""
    if not any(marker in arg for arg in argv[:3] for marker in _WORKER_MARKERS):
        return None
    flags = _flags(argv)
    if "metrics-port" not in flags:
        return None
    addresses = [flags.get("redis-url", "redis://127.0.0.1:6390/0"), *flags.get_all("sentinel")]
    used = {int(m[1]) for a in addresses if (m := _PORT_IN.search(a))}
    if not used & redis_ports:
        return None
    with contextlib.suppress(ValueError):
        return WorkerTarget(
            name=f"pid-{pid}",
            port=int(flags["metrics-port"]),
            stream=flags.get("stream", DEFAULTS["stream"]),
            group=flags.get("group", DEFAULTS["group"]),
            consumer=flags.get("consumer", ""),
        )
    return None


def discover(redis_ports: set[int], proc_dir: Path = Path("/proc")) -> list[WorkerTarget]:
    """Running billing-workers with ``--metrics-port`` that use one of ``redis_ports``."""
    found: list[WorkerTarget] = []
    for cmdline in proc_dir.glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = [a.decode(errors="replace") for a in cmdline.read_bytes().split(b"\0") if a]
            if target := parse_worker_argv(argv, int(cmdline.parent.name), redis_ports):
                found.append(target)
    return found


class _Flags(dict[str, str]):
    def __init__(self) -> None:
        super().__init__()
        self.repeated: dict[str, list[str]] = {}

    def get_all(self, name: str) -> list[str]:
        return self.repeated.get(name, [])


def _flags(argv: list[str]) -> _Flags:
    """``--name value`` and ``--name=value`` pairs (the last one wins; all kept in ``repeated``)."""
    flags = _Flags()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq and i + 1 < len(argv):
                value, i = argv[i + 1], i + 1
            flags[name] = value
            flags.repeated.setdefault(name, []).append(value)
        i += 1
    return flags
