"""The config files the launcher writes: redis.conf for servers, sentinel.conf for sentinels."""

from __future__ import annotations

from labs.launcher.process import RedisProcess
from labs.launcher.sentinel import MASTER_NAME, QUORUM

PERSISTENT = ("aof", "sentinel", "cluster")


def _bind_lines(proc: RedisProcess) -> list[str]:
    """Loopback; in a network namespace also its own address (private to the run's namespaces)."""
    if proc.netns is None:
        return ["bind 127.0.0.1"]
    return [f"bind 127.0.0.1 {proc.host}", "protected-mode no"]


def server_conf(
    topology: str,
    proc: RedisProcess,
    replica_of: int | None,
    extra: tuple[str, ...] = (),
    *,
    master_host: str = "127.0.0.1",
) -> str:
    """A redis-server config: loopback, no RDB snapshots, AOF everysec for ``aof``, ``sentinel``, ``cluster``."""
    persist = topology in PERSISTENT
    lines = [
        f"port {proc.port}",
        *_bind_lines(proc),
        "daemonize no",
        f'dir "{proc.data_dir}"',
        'save ""',
        f"appendonly {'yes' if persist else 'no'}",
        "appendfsync everysec",
        # Start a replica's full sync at once (the default waits 5 s to batch replicas).
        "repl-diskless-sync-delay 0",
    ]
    if replica_of is not None:
        lines.append(f"replicaof {master_host} {replica_of}")
    return "\n".join([*lines, *extra]) + "\n"


def sentinel_conf(proc: RedisProcess, master_port: int, down_after_ms: int, *, master_host: str = "127.0.0.1") -> str:
    """A sentinel config watching ``mymaster`` at ``master_port`` with quorum 2."""
    lines = [
        f"port {proc.port}",
        *_bind_lines(proc),
        "daemonize no",
        f'dir "{proc.data_dir}"',
        f"sentinel monitor {MASTER_NAME} {master_host} {master_port} {QUORUM}",
        f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}",
        f"sentinel failover-timeout {MASTER_NAME} 10000",
        f"sentinel parallel-syncs {MASTER_NAME} 1",
    ]
    return "\n".join(lines) + "\n"


def cluster_lines(node_timeout_ms: int) -> tuple[str, ...]:
    """The settings that make a redis-server a node of the ``cluster`` topology (its state in ``nodes.conf``)."""
    return (
        "cluster-enabled yes",
        "cluster-config-file nodes.conf",
        f"cluster-node-timeout {node_timeout_ms}",
        # With the default 'yes' a node refuses every key as soon as one slot has no live
        # master, so while one shard's master is being replaced (about node-timeout plus the
        # election) every other shard stalls too. 'no' keeps the healthy shards serving; only
        # the keys of the failed master's slots wait for its replica's promotion.
        "# 'no': one shard's failover must not stall the others (labs/launcher/configs.py)",
        "cluster-require-full-coverage no",
    )
