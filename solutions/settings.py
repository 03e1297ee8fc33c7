"""The worker's settings: one frozen, keyword-only dataclass, validated when it is built.

Build it in code (``Settings(stream="orders", dedupe="sqlite")``), from the CLI flags of
``billing-worker`` (see :mod:`solutions.billing`) or from ``BILLING_*`` environment variables,
which become the flags' defaults (``BILLING_DEDUPE=redis`` is ``--dedupe redis``).

:class:`Endpoint` is where a stream lives (a URL, Sentinels, or a cluster and its shard count),
the part both CLIs share: ``billing-worker`` and ``billing-producer`` take the same connection
flags (:func:`solutions.cli.add_connection_flags`) and check them by the same rules
(:func:`endpoint_problems`, which :class:`Settings` applies to its own fields too).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from solutions.ledger import BUSY_TIMEOUT_MS

DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"


class InputError(ValueError):
    """What the flags point at is wrong (not a cluster node, a registry key holding junk): the CLIs exit 2."""


MAX_SHARDS = 16384  # a Redis Cluster's slots: every shard of a stream needs its own
DEDUPE_STRATEGIES = ("none", "redis", "redis-2phase", "sqlite")
ENV_PREFIX = "BILLING_"
SOCKET_MARGIN_S = 1.5
Address = tuple[str, int]


def default_consumer() -> str:
    """A consumer name unique per process: ``<hostname>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def parse_address(text: str) -> Address:
    """``HOST:PORT`` -> ``(host, port)``; raises ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def env_default(name: str, default: str) -> str:
    """The value of ``BILLING_<NAME>`` (dashes become underscores), else ``default``."""
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_"), default)


def endpoint_problems(*, redis_url: str, sentinels: tuple[Address, ...], cluster: tuple[Address, ...],
                      shards: int | None) -> list[str]:
    """What is wrong with where a stream is said to live (nothing: an empty list)."""
    return [
        problem
        for problem in (
            "" if sentinels or cluster or redis_url else "give redis_url, sentinels or cluster",
            "" if not (sentinels and cluster) else "give sentinels or cluster, not both",
            "" if shards is None or 1 <= shards <= MAX_SHARDS
            else f"shards must be 1 to {MAX_SHARDS} (each shard takes a cluster slot of its own), got {shards}",
            "" if shards is None or cluster else "shards needs cluster (a stream is sharded on a cluster)",
        )
        if problem
    ]


def addresses(pairs: tuple[Address, ...]) -> tuple[Address, ...]:
    """``(host, port)`` pairs as ``(str, int)`` (a list from JSON or a notebook becomes a tuple)."""
    return tuple((str(host), int(port)) for host, port in pairs)


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a stream lives: a plain Redis by URL, the master Sentinel names, or the shards on a cluster."""

    redis_url: str = DEFAULT_REDIS_URL
    sentinels: tuple[Address, ...] = ()
    master_name: str = "mymaster"
    cluster: tuple[Address, ...] = ()  # startup nodes of a Redis Cluster: the stream's shards live there
    shards: int | None = None  # with ``cluster``: how many shards (None: as registered in <stream>:shards)

    def __post_init__(self) -> None:
        problems = endpoint_problems(redis_url=self.redis_url, sentinels=self.sentinels, cluster=self.cluster,
                                     shards=self.shards)
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))  # as Settings says it
        object.__setattr__(self, "sentinels", addresses(self.sentinels))
        object.__setattr__(self, "cluster", addresses(self.cluster))

    def fields(self) -> EndpointFields:
        """The same values as keyword arguments of :class:`Settings`: ``Settings(**endpoint.fields(), ...)``."""
        return EndpointFields(redis_url=self.redis_url, sentinels=self.sentinels, master_name=self.master_name,
                              cluster=self.cluster, shards=self.shards)


class EndpointFields(TypedDict):
    """:class:`Endpoint`'s fields, which :class:`Settings` has too."""

    redis_url: str
    sentinels: tuple[Address, ...]
    master_name: str
    cluster: tuple[Address, ...]
    shards: int | None


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a :class:`solutions.worker.Worker` needs; see ``billing-worker --help``."""

    redis_url: str = DEFAULT_REDIS_URL
    sentinels: tuple[Address, ...] = ()
    master_name: str = "mymaster"
    cluster: tuple[Address, ...] = ()  # startup nodes of a Redis Cluster: read the stream's shards there
    shards: int | None = None  # with ``cluster``: how many shards (None: as registered in <stream>:shards)
    stream: str = "orders"
    group: str = "billing"
    consumer: str = field(default_factory=default_consumer)
    count: int = 16
    block_ms: int = 2000
    parallelism: int = 8
    order_key: str = "order_id"
    min_idle_ms: int = 120_000
    claim_interval_ms: int = 30_000
    max_attempts: int = 5
    dedupe: str = "sqlite"
    ledger: Path = Path(".run/ledger.sqlite3")
    ledger_busy_timeout_ms: int = BUSY_TIMEOUT_MS
    handler_delay_ms: int = 50
    handler_jitter_ms: int = 0
    fail_every: int = 0
    drain_timeout_s: float = 30.0
    metrics_interval_s: float = 10.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    dedupe_ttl_s: int = 7 * 24 * 3600
    rescuer: bool = True

    def __post_init__(self) -> None:
        problems = [p for p in self._problems() if p]
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))
        object.__setattr__(self, "ledger", Path(self.ledger))
        object.__setattr__(self, "sentinels", addresses(self.sentinels))
        object.__setattr__(self, "cluster", addresses(self.cluster))

    def _problems(self) -> list[str]:
        positive = {
            "count": self.count,
            "block_ms": self.block_ms,
            "parallelism": self.parallelism,
            "claim_interval_ms": self.claim_interval_ms,
            "max_attempts": self.max_attempts,
            "dedupe_ttl_s": self.dedupe_ttl_s,
            "ledger_busy_timeout_ms": self.ledger_busy_timeout_ms,
        }
        not_negative = {
            "min_idle_ms": self.min_idle_ms,
            "handler_delay_ms": self.handler_delay_ms,
            "handler_jitter_ms": self.handler_jitter_ms,
            "fail_every": self.fail_every,
            "drain_timeout_s": self.drain_timeout_s,
        }
        return [
            *(f"{name} must be > 0, got {value}" for name, value in positive.items() if value <= 0),
            *(f"{name} must be >= 0, got {value}" for name, value in not_negative.items() if value < 0),
            "" if self.dedupe in DEDUPE_STRATEGIES else f"dedupe must be one of {DEDUPE_STRATEGIES}",
            "" if self.metrics_interval_s > 0 else "metrics_interval_s must be > 0",
            "" if self.metrics_port is None or 0 <= self.metrics_port < 65536 else "bad metrics_port",
            "" if self.stream and self.group and self.consumer else "stream, group and consumer must be set",
            *endpoint_problems(redis_url=self.redis_url, sentinels=self.sentinels, cluster=self.cluster,
                               shards=self.shards),
        ]

    @property
    def dlq_stream(self) -> str:
        """Where dead letters go: ``<stream>:dlq``."""
        return f"{self.stream}:dlq"

    @property
    def socket_timeout_s(self) -> float:
        """Longer than BLOCK, so that an idle blocking read is never mistaken for a dead socket."""
        return self.block_ms / 1000 + SOCKET_MARGIN_S

    @property
    def rescuer_lease_key(self) -> str:
        """The key whose holder is the group's one active rescuer."""
        return f"{self.stream}:{self.group}:rescuer"

    @property
    def dedupe_prefix(self) -> str:
        """Prefix of the Redis dedupe markers (``redis`` and ``redis-2phase`` strategies)."""
        return f"processed:{self.stream}:{self.group}:"
