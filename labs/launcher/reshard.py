"""Move one slot (and its keys) from one master to another, as ``redis-cli --cluster reshard`` does.

The documented live-resharding steps, each one function so that a test or a notebook can stop
between them (while the slot is half-moved, the source answers ``ASK`` for the keys it no
longer has):

1. :func:`begin_migration`: ``CLUSTER SETSLOT <slot> IMPORTING <source-id>`` on the target, then
   ``CLUSTER SETSLOT <slot> MIGRATING <target-id>`` on the source;
2. :func:`migrate_keys`: ``CLUSTER GETKEYSINSLOT`` and ``MIGRATE ... KEYS`` on the source until
   the slot is empty there (a stream moves whole: entries, consumer groups, their PELs);
3. :func:`finish_migration`: ``CLUSTER SETSLOT <slot> NODE <target-id>`` on the target, the
   source, and every other master, then wait until every live node names the target.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

from labs.launcher.cluster import ClusterTopology
from labs.launcher.cluster_state import ClusterNode, masters, owner
from labs.launcher.errors import LauncherError
from labs.launcher.process import command

MIGRATE_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class Migration:
    slot: int
    source: ClusterNode
    target: ClusterNode


def begin_migration(topology: ClusterTopology, slot: int, to_port: int) -> Migration:
    """Mark ``slot`` importing on the master at ``to_port`` and migrating on its current master."""
    view = topology.nodes()
    source = owner(view, slot)
    target = next((n for n in view if n.port == to_port and n.is_master and not n.failing), None)
    if source is None or target is None:
        raise LauncherError(f"slot {slot} has no master, or port {to_port} is not a live master")
    if source.node_id == target.node_id:
        raise LauncherError(f"slot {slot} is already served by {to_port}")
    _setslot(topology, target.port, slot, "IMPORTING", source.node_id)
    _setslot(topology, source.port, slot, "MIGRATING", target.node_id)
    return Migration(slot, source, target)


def migrate_keys(
    topology: ClusterTopology, move: Migration, keys: Sequence[str] | None = None, batch: int = 100
) -> int:
    """``MIGRATE`` the given keys (default: every key of the slot still on the source); returns how many."""
    moved = 0
    target = ("127.0.0.1", str(move.target.port), "", "0", str(MIGRATE_TIMEOUT_MS))
    source = topology.server(move.source.port)
    with contextlib.closing(source.client(timeout_s=MIGRATE_TIMEOUT_MS / 1000 + 1)) as src:
        while True:
            chunk = keys if keys is not None else command(src, "CLUSTER", "GETKEYSINSLOT", str(move.slot), str(batch))
            if not chunk:
                return moved
            command(src, "MIGRATE", *target, "KEYS", *chunk)
            moved += len(chunk)
            if keys is not None:
                return moved


def finish_migration(topology: ClusterTopology, move: Migration, timeout_s: float = 10.0) -> None:
    """``CLUSTER SETSLOT <slot> NODE <target>`` everywhere, then wait until every live node agrees."""
    # Masters only (Redis refuses SETSLOT on a replica); replicas learn it from their master.
    others = [m.port for m in masters(topology.nodes()) if m.port not in (move.target.port, move.source.port)]
    for port in (move.target.port, move.source.port, *others):
        _setslot(topology, port, move.slot, "NODE", move.target.node_id)
    topology.wait_serving(move.target, move.slot, time.monotonic() + timeout_s)


def move_slot(topology: ClusterTopology, slot: int, to_port: int) -> Migration:
    """The three steps in a row: ``slot`` with all its keys now served by the master at ``to_port``."""
    move = begin_migration(topology, slot, to_port)
    migrate_keys(topology, move)
    finish_migration(topology, move)
    return move


def _setslot(topology: ClusterTopology, port: int, slot: int, *args: str) -> None:
    with contextlib.closing(topology.server(port).client()) as client:
        command(client, "CLUSTER", "SETSLOT", str(slot), *args)
