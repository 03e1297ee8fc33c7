"""The comparison brokers of module 4 as launcher topologies: ``rabbitmq`` and ``nats``.

``python -m labs up rabbitmq|nats``, ``status`` and ``down`` reach them through this registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labs.launcher.nats import NatsCluster
from labs.launcher.rabbitmq import RabbitCluster

BROKERS = ("rabbitmq", "nats")
Cluster = RabbitCluster | NatsCluster


@dataclass(frozen=True)
class BrokerRow:
    name: str
    port: int
    pid: int | None
    detail: str


def from_env(name: str, run_dir: Path) -> Cluster:
    return RabbitCluster.from_env(run_dir) if name == "rabbitmq" else NatsCluster.from_env(run_dir)


def running(cluster: Cluster) -> bool:
    return any(proc.pid() for proc in cluster.processes)


def status_rows(cluster: Cluster) -> list[BrokerRow]:
    """One row per process; the leader of the queue (stream) ``orders`` where it answers."""
    try:
        leader = cluster.leader_port()
    except Exception:
        leader = None
    rows = []
    for proc in cluster.processes:
        role = "epmd" if proc.name == "epmd" else ("leader of orders" if proc.port == leader else "member")
        rows.append(BrokerRow(proc.name, proc.port, proc.pid(), role))
    return rows
