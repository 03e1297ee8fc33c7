"""Redis with three copies for the broker comparison: a master and two replicas under three sentinels.

RabbitMQ's quorum queue and NATS's R3 stream keep three copies and confirm once a majority (two)
has a write; the lab's ``sentinel`` topology keeps two. :func:`three_copies` builds the like-for-like
Redis (issue 42, item 2) on free ports, with the settings notebook 03 teaches:

- ``min-replicas-to-write 1`` (with ``min-replicas-max-lag``, 10 s by default): a master that has
  heard from no replica for that long refuses writes (``NOREPLICAS``), so a master cut off from
  the others stops accepting after at most that lag instead of for ever;
- the producer's ``WAIT 1`` then means what the others' confirms mean: a second copy has it;
- ``appendfsync`` ``everysec`` (default: up to about 2 s of acknowledged writes can be lost on a
  machine crash, not on a process kill) or ``always`` (the fsync-parity row: every write is on the
  master's disk before the reply, as RabbitMQ fdatasyncs before a confirm and NATS with
  ``sync_interval: always``).

Sentinel's timers decide the failover gap: ``down-after-milliseconds`` (here ``down_after_ms``),
then an election among the sentinels and the promotion.
The processes are owned by the calling process (:mod:`labs.launcher.broker_registry`): they stop
when it exits by any means, and ``python -m labs down`` finds them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from labs.launcher import broker_registry, ports, reaper, topologies
from labs.launcher.errors import LauncherError
from labs.launcher.topology import SentinelTopology

Fsync = Literal["everysec", "always"]
REPLICAS = 2
DEFAULT_MAX_LAG_S = 10  # Redis's own default of min-replicas-max-lag


@dataclass(frozen=True, kw_only=True)
class Copies:
    """The like-for-like Redis settings: how many replicas, how many must be current to write, the fsync."""

    replicas: int = REPLICAS
    min_replicas_to_write: int = 1
    min_replicas_max_lag_s: int = DEFAULT_MAX_LAG_S
    fsync: Fsync = "everysec"
    down_after_ms: int = 1000

    def __post_init__(self) -> None:
        if self.fsync not in ("everysec", "always"):
            raise LauncherError(f"appendfsync {self.fsync!r}: use everysec or always")
        if not 0 <= self.min_replicas_to_write <= self.replicas:
            raise LauncherError(f"min-replicas-to-write {self.min_replicas_to_write} with {self.replicas} replicas")

    def config(self) -> tuple[str, ...]:
        """The redis.conf lines added after the launcher's own (a later line wins)."""
        return ("appendonly yes", f"appendfsync {self.fsync}",
                f"min-replicas-to-write {self.min_replicas_to_write}",
                f"min-replicas-max-lag {self.min_replicas_max_lag_s}")

    def durability(self, wait_replicas: int) -> str:
        """What a confirmed XADD means with this topology and ``WAIT wait_replicas`` (for every row)."""
        copies = self.replicas + 1
        fsync = "fsync before the reply (appendfsync always)" if self.fsync == "always" \
            else "fsync every second (appendfsync everysec)"
        wait = f"reply after WAIT {wait_replicas} (a replica has it)" if wait_replicas else \
            "reply from the master alone (no WAIT)"
        return (f"Redis, {copies} copies (master + {self.replicas} replicas, Sentinel), "
                f"min-replicas-to-write {self.min_replicas_to_write}: {wait}; {fsync} on the master")


def three_copies(run_dir: Path, copies: Copies | None = None, *, netns: bool = False) -> SentinelTopology:
    """A master, ``copies.replicas`` replicas and three sentinels on free ports under ``run_dir/sentinel/``.

    Nothing starts until ``ensure()``; call :func:`own` after it so the processes stop with their
    owner. ``netns`` puts each process in a network namespace of its own (root; for partitions).
    """
    settings = copies or Copies()
    picked = ports.free_ports(settings.replicas + 1 + 3, ports.session_port_window())
    n = settings.replicas + 1
    return topologies.create("sentinel", Path(run_dir), server_ports=picked[:n], sentinel_ports=picked[n:],
                             down_after_ms=settings.down_after_ms, extra_config=settings.config(), netns=netns)


def own(topo: SentinelTopology, owner_pid: int | None = -1) -> None:
    """Record every running process of ``topo`` for ``make down`` and, with an owner, its reaper.

    Call it after ``ensure()`` and after restarting a process (the record is by pid).
    """
    owner = os.getpid() if owner_pid == -1 else owner_pid
    if owner is not None:
        reaper.ensure(owner)
    for proc in topo.processes:
        if (pid := proc.pid()) is not None:
            broker_registry.record("redis", proc.name, pid, proc.pidfile, owner)
