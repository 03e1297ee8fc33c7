"""The launcher's Python API, for notebooks, labs and tests.

>>> from labs import launcher
>>> addrs = launcher.ensure("sentinel")      # start or reuse; returns the addresses
>>> launcher.failover(hard=True)             # kill -9 the master, wait for a quorum
>>> launcher.status("sentinel").nodes        # roles and replication offsets
>>> launcher.stop("sentinel")                # stop every process it started
>>> launcher.ensure("cluster").ports         # 3 masters + 3 replicas: any node starts a cluster client
>>> launcher.failover_cluster(hard=True)     # kill -9 a master; returns when every node names its replica

Ports and the run directory follow :mod:`labs.launcher.ports` and ``$LAB_RUN_DIR``; tests set those
variables so that notebook kernels started by nbval use free ports too.
"""

from __future__ import annotations

from labs.launcher import topologies
from labs.launcher.cluster import ClusterFailoverResult, ClusterTopology
from labs.launcher.errors import LauncherError
from labs.launcher.topology import (
    Addresses,
    FailoverResult,
    SentinelTopology,
    Topology,
    TopologyStatus,
)

__all__ = [
    "Addresses",
    "ClusterFailoverResult",
    "ClusterTopology",
    "FailoverResult",
    "LauncherError",
    "SentinelTopology",
    "Topology",
    "TopologyStatus",
    "ensure",
    "failover",
    "failover_cluster",
    "status",
    "stop",
]


def ensure(name: str = "single") -> Addresses:
    """Start the topology ``single``, ``aof``, ``sentinel`` or ``cluster`` (or reuse it) and return its addresses."""
    return topologies.from_env(name).ensure()


def status(name: str = "single") -> TopologyStatus:
    """Roles, ports, replication offsets and the master each sentinel reports."""
    return topologies.from_env(name).status()


def failover(*, hard: bool = False, timeout_s: float = 30.0, restart_old: bool = True) -> FailoverResult:
    """Fail the ``sentinel`` topology over; returns once a quorum reports the new master."""
    return topologies.from_env("sentinel").failover(hard=hard, timeout_s=timeout_s, restart_old=restart_old)


def failover_cluster(
    *, hard: bool = False, master_port: int | None = None, timeout_s: float = 30.0, restart_old: bool = True
) -> ClusterFailoverResult:
    """Fail one master of the ``cluster`` topology over (``CLUSTER FAILOVER``, or kill -9 with ``hard``).

    Returns a :class:`~labs.launcher.cluster.ClusterFailoverResult` (``elapsed_s`` until every
    live node names the new master, ``slots``, ``ready_s`` once the old master is a linked replica).
    """
    topo = topologies.from_env("cluster")
    return topo.failover(hard=hard, master_port=master_port, timeout_s=timeout_s, restart_old=restart_old)


def stop(name: str = "single") -> list[int]:
    """Stop every process of the topology by pid; returns the pids that were stopped."""
    return topologies.from_env(name).stop()
