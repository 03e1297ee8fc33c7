"""What ``make status`` shows: each node's role and offset, each sentinel's master."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import redis

from labs.launcher.flavours import describe
from labs.launcher.process import RedisProcess
from labs.launcher.sentinel import Address


@dataclass(frozen=True)
class NodeStatus:
    name: str
    port: int
    pid: int | None
    role: str
    offset: int | None
    detail: str
    server: str = ""  # flavour and version, ``redis8 (Redis 8.2.3)``


@dataclass(frozen=True)
class SentinelStatus:
    name: str
    port: int
    pid: int | None
    master: Address | None
    server: str = ""


@dataclass(frozen=True)
class TopologyStatus:
    topology: str
    nodes: tuple[NodeStatus, ...]
    sentinels: tuple[SentinelStatus, ...]

    @property
    def running(self) -> bool:
        return any(n.pid for n in self.nodes) or any(s.pid for s in self.sentinels)


def server_label(proc: RedisProcess) -> str:
    """``INFO server`` of one process as its flavour and version (``valkey8 (Valkey 8.0.1)``), ``""`` when down."""
    with contextlib.closing(proc.client()) as client:
        try:
            return describe(client.info("server"))
        except redis.RedisError:
            return ""


def node_status(proc: RedisProcess) -> NodeStatus:
    """``INFO replication`` of one redis-server as a status row."""
    pid = proc.pid()
    with contextlib.closing(proc.client()) as client:
        try:
            info = client.info("replication")
        except redis.RedisError:
            return NodeStatus(proc.name, proc.port, pid, "down", None, "")
    role = str(info.get("role", "?"))
    if role == "master":
        offset = info.get("master_repl_offset")
        detail = f"{info.get('connected_slaves', 0)} replica(s) linked"
    else:
        offset = info.get("slave_repl_offset")
        detail = f"of {info.get('master_host')}:{info.get('master_port')}, link {info.get('master_link_status')}"
    offset_n = int(offset) if offset is not None else None
    return NodeStatus(proc.name, proc.port, pid, role, offset_n, detail, server_label(proc))
