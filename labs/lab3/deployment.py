"""Where lab 3's Redis runs and how the lab hurts it: the one module that knows the topology.

Everything else in the lab talks to a :class:`Deployment`: the addresses a worker and the
producer get (flags and environment), the lab's own client of the master, the failover, and
the write pause that the crash mode uses to catch a worker between its charge and its XACK.
:class:`SentinelDeployment` is the native ``sentinel`` topology (a master, a replica, three
sentinels); :class:`~labs.lab3.cluster_site.ClusterDeployment` the native ``cluster`` topology,
where a cell's stream is sharded (:class:`~labs.lab3.streams.CellStreams` is how the lab reads
either).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypedDict

import redis

from labs import launcher
from labs.lab3.probe import master_client
from labs.lab3.streams import CellStreams
from labs.launcher import topologies

FAILOVER_TIMEOUT_S = 30.0


class Fault(TypedDict, total=False):
    """What a phase's fault did, as the report shows it: its ``kind`` and when (``fault_t``, unix time);
    a failover's masters and timings, a SIGTERM's restart, a crash's catches, or the ``error`` that stopped it."""

    kind: str
    error: str
    fault_t: float
    old: tuple[str, int]
    new: tuple[str, int]
    slots: list[list[int]]  # on a cluster: the failed master's slot ranges
    promoted_t: float
    promoted_after_s: float
    replica_back_after_s: float | None
    restarted_after_s: float
    pauses: int
    caught: int
    cells: int
    held_after_kill: int


class Deployment(Protocol):
    """What the lab needs to know about the Redis it runs on."""

    name: ClassVar[str]  # the topology's name: --topology, the report

    def ensure(self) -> None:
        """Start the topology, or wait until it is whole again (after a failover)."""
        ...

    def worker_flags(self) -> list[tuple[str, str]]:
        """The connection flags of the worker contract, in order (a flag may repeat)."""
        ...

    def worker_env(self) -> dict[str, str]:
        """The same connection settings as environment variables."""
        ...

    def producer_flags(self) -> list[str]:
        """``billing-producer``'s connection flags."""
        ...

    def client(self) -> redis.Redis:
        """The lab's own client of the current master (decoded replies, short timeouts)."""
        ...

    def fail_over(self, hard: bool) -> Fault:
        """Fail the master over under load; returns what happened (see :class:`SentinelDeployment`)."""
        ...

    def pause_writes(self, client: redis.Redis, ms: int) -> contextlib.AbstractContextManager[None]:
        """Hold every write command (XACK, XADD, XREADGROUP ...) for up to ``ms``; reads still answer."""
        ...

    def cell_streams(self, client: redis.Redis, stream: str) -> CellStreams:
        """The keys a cell's events live in (one stream, or its shards), read through ``client``."""
        ...

    def reading_clients(self, client: redis.Redis) -> int:
        """How many clients wait in XREADGROUP (a worker that only blocks may not show as a consumer yet)."""
        ...


@dataclass
class SentinelDeployment:
    """The native Sentinel topology (``make up-sentinel``), found through ``labs.launcher``."""

    name: ClassVar[str] = "sentinel"

    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str = "mymaster"
    fault: Fault = field(default_factory=lambda: Fault())

    def ensure(self) -> None:
        addrs = launcher.ensure("sentinel")
        self.sentinels, self.master_name = tuple(addrs.sentinels), addrs.master_name or "mymaster"

    def worker_flags(self) -> list[tuple[str, str]]:
        return [*(("sentinel", f"{h}:{p}") for h, p in self.sentinels), ("master-name", self.master_name)]

    def worker_env(self) -> dict[str, str]:
        return {"BILLING_SENTINELS": ",".join(f"{h}:{p}" for h, p in self.sentinels),
                "BILLING_MASTER_NAME": self.master_name}

    def producer_flags(self) -> list[str]:
        return [arg for name, value in self.worker_flags() for arg in (f"--{name}", value)]

    def client(self) -> redis.Redis:
        return master_client(self.sentinels, self.master_name)

    def fail_over(self, hard: bool) -> Fault:
        """``kill -9`` of the master (``hard``) or ``SENTINEL FAILOVER``, timed.

        Returns ``kind``, ``old`` and ``new`` (the masters), ``fault_t`` (when the fault hit),
        ``promoted_t`` and ``promoted_after_s``; after a kill the old master is started again once
        every sentinel has switched (Sentinel then turns it into a replica, some seconds later),
        and ``replica_back_after_s`` says when the topology was whole again.
        """
        if not hard:
            fault_t = time.time()
            result = launcher.failover(hard=False, timeout_s=FAILOVER_TIMEOUT_S)
            promoted_t = time.time()
            return {"kind": "SENTINEL FAILOVER", "old": result.old_master, "new": result.new_master,
                    "fault_t": fault_t, "promoted_t": promoted_t, "promoted_after_s": result.elapsed_s}
        topo = topologies.from_env("sentinel")
        old = topo.master_addr()
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        fault_t = time.time()
        topo.server(old[1]).kill(signal.SIGKILL)
        new = topo.wait_new_master(old, deadline)
        promoted_t = time.time()
        fault: Fault = {"kind": "kill -9", "old": old, "new": new, "fault_t": fault_t, "promoted_t": promoted_t,
                 "promoted_after_s": promoted_t - fault_t}
        fault["new"] = topo.wait_switched(old, deadline)  # a second failover may have followed the first
        topo.start(topo.server(old[1]))
        topo.wait_ready(FAILOVER_TIMEOUT_S)
        fault["replica_back_after_s"] = time.time() - fault_t
        return fault

    def cell_streams(self, client: redis.Redis, stream: str) -> CellStreams:
        return CellStreams(client, (stream,))

    def reading_clients(self, client: redis.Redis) -> int:
        with contextlib.suppress(redis.RedisError):
            return sum(1 for c in client.client_list() if c.get("cmd") == "xreadgroup")
        return 0

    @contextlib.contextmanager
    def pause_writes(self, client: redis.Redis, ms: int) -> Iterator[None]:
        """``CLIENT PAUSE ms WRITE`` on the master, ``CLIENT UNPAUSE`` on the way out.

        A paused write waits in the server; a client that dies meanwhile never gets it executed
        (Redis drops a postponed command when its connection closes).
        """
        client.client_pause(ms, all=False)  # all=False: WRITE
        try:
            yield
        finally:
            with contextlib.suppress(redis.RedisError):
                client.client_unpause()
