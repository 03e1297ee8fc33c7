"""What the nodes of a cluster say: ``CLUSTER NODES``, ``CLUSTER INFO``, readiness, status rows.

Free functions over the node processes, so that :class:`~labs.launcher.cluster.ClusterTopology`
stays about lifecycle, as :mod:`labs.launcher.sentinel` does for Sentinel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from labs.launcher.process import RedisProcess, command
from labs.launcher.status import NodeStatus, server_label

SLOTS = 16384
SlotRange = tuple[int, int]


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``: a node as one member of the cluster sees it."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    link_up: bool
    slots: tuple[SlotRange, ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failing(self) -> bool:
        """Flagged ``fail`` (agreed) or ``fail?`` (this node's own suspicion)."""
        return bool(self.flags & {"fail", "fail?"})

    def owns(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)


def parse_nodes(text: str) -> list[ClusterNode]:
    """Parse ``CLUSTER NODES`` (``id ip:port@bus flags master ping pong epoch link slot...``)."""
    nodes = []
    for line in text.strip().splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        address = parts[1].split("@")[0]
        slots = tuple(_slot_range(word) for word in parts[8:] if not word.startswith("["))
        nodes.append(
            ClusterNode(
                node_id=parts[0],
                port=int(address.rsplit(":", 1)[1] or 0),
                flags=frozenset(parts[2].split(",")),
                master_id=None if parts[3] == "-" else parts[3],
                link_up=parts[7] == "connected",
                slots=slots,
            )
        )
    return nodes


def _slot_range(word: str) -> SlotRange:
    lo, _, hi = word.partition("-")
    return int(lo), int(hi or lo)


def nodes_view(proc: RedisProcess) -> list[ClusterNode] | None:
    """``CLUSTER NODES`` on one node, parsed (None when it does not answer)."""
    with contextlib.closing(proc.client()) as client:
        try:
            return parse_nodes(str(command(client, "CLUSTER", "NODES")))
        except redis.RedisError:
            return None


def cluster_info(proc: RedisProcess) -> dict[str, str] | None:
    """``CLUSTER INFO`` on one node as a dict (None when it does not answer)."""
    with contextlib.closing(proc.client()) as client:
        try:
            text = str(command(client, "CLUSTER", "INFO"))
        except redis.RedisError:
            return None
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def any_view(procs: Sequence[RedisProcess]) -> list[ClusterNode]:
    """The ``CLUSTER NODES`` view of the first live node ([] when none answers)."""
    for proc in procs:
        if proc.pid() is not None and (view := nodes_view(proc)) is not None:
            return view
    return []


def masters(view: Sequence[ClusterNode]) -> list[ClusterNode]:
    """The live masters that serve slots, by their first slot."""
    serving = [n for n in view if n.is_master and n.slots and not n.failing]
    return sorted(serving, key=lambda n: n.slots[0][0])


def replicas_of(view: Sequence[ClusterNode], master: ClusterNode) -> list[ClusterNode]:
    return [n for n in view if n.master_id == master.node_id and not n.failing]


def owner(view: Sequence[ClusterNode], slot: int) -> ClusterNode | None:
    """The master that this view says serves ``slot``."""
    return next((n for n in view if n.is_master and n.owns(slot)), None)


def readiness_problem(procs: Sequence[RedisProcess]) -> str:
    """Why the cluster is not ready yet ('' when every slot is served, every node ok, every replica linked)."""
    expected = len(procs)
    for proc in procs:
        info = cluster_info(proc)
        if info is None:
            return f"{proc.name} does not answer"
        if info.get("cluster_state") != "ok":
            return f"{proc.name}: cluster_state {info.get('cluster_state')}"
        if int(info.get("cluster_slots_ok", 0)) != SLOTS:
            return f"{proc.name}: {info.get('cluster_slots_ok')} of {SLOTS} slots served"
        if int(info.get("cluster_known_nodes", 0)) != expected:
            return f"{proc.name} knows {info.get('cluster_known_nodes')} of {expected} nodes"
    view = any_view(procs)
    if any(n.failing for n in view):
        return "a node is still flagged as failing: " + ", ".join(str(n.port) for n in view if n.failing)
    for master in masters(view):
        if not replicas_of(view, master):
            return f"master {master.port} has no replica"
    by_port = {proc.port: proc for proc in procs}
    for node in view:
        if not node.is_master and (link := _link_status(_replication(by_port[node.port]))) != "up":
            return f"replica {node.port}: master link {link}"
    return ""


def _replication(proc: RedisProcess) -> dict[str, Any] | None:
    """``INFO replication`` of a node; None when it does not answer."""
    with contextlib.closing(proc.client()) as client:
        try:
            return client.info("replication")
        except redis.RedisError:
            return None


def _link_status(info: dict[str, Any] | None) -> str:
    """``master_link_status`` of a replica, ``syncing`` while its first sync runs."""
    if info is None:
        return "unknown (no answer)"
    if int(info.get("master_sync_in_progress", 0)):
        return "syncing"
    return str(info.get("master_link_status", "?"))


def format_ranges(ranges: Sequence[SlotRange]) -> str:
    """``0-5460 (5461 slots)``, several ranges joined with commas."""
    count = sum(hi - lo + 1 for lo, hi in ranges)
    shown = ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in ranges)
    return f"{shown} ({count} slots)"


def status_rows(procs: Sequence[RedisProcess]) -> tuple[NodeStatus, ...]:
    """One row per node: a master with its slots and replica, a replica with its master and link."""
    view = {n.port: n for n in any_view(procs)}
    by_id = {n.node_id: n for n in view.values()}
    rows = []
    for proc in procs:
        info = _replication(proc)
        offset = _offset(info)
        node = view.get(proc.port)
        if offset is None or node is None:
            detail = "" if offset is None else "not in a cluster yet"
            rows.append(NodeStatus(proc.name, proc.port, proc.pid(), "down" if offset is None else "?", offset, detail))
            continue
        if node.is_master:
            replicas = [n.port for n in view.values() if n.master_id == node.node_id]
            detail = f"slots {format_ranges(node.slots)}; replica(s) {', '.join(map(str, replicas)) or 'none'}"
        else:
            master = by_id.get(node.master_id or "")
            detail = f"replica of {master.port if master else '?'}, link {_link_status(info)}"
        if node.failing:
            detail += "; flagged failing"
        role = "master" if node.is_master else "replica"
        rows.append(NodeStatus(proc.name, proc.port, proc.pid(), role, offset, detail, server_label(proc)))
    return tuple(rows)


def _offset(info: dict[str, Any] | None) -> int | None:
    if info is None:
        return None
    key = "master_repl_offset" if info.get("role") == "master" else "slave_repl_offset"
    return int(info.get(key, 0))
