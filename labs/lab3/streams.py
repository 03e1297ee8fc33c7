"""A cell's stream as the lab reads it: one key through Sentinel, or the N shards of a stream on a cluster.

On Sentinel a cell's events live in one stream; on Redis Cluster in N shards ``<stream>:{tag}``
(the stream's registered shard set, :mod:`solutions.shards`), each with its own group, PEL and
DLQ. :class:`CellStreams` gives the lab one view of them: the group's state summed over the
shards, the pending entries and the stream's entries of every shard, the DLQs. An entry id is
unique only within its shard, so with shards every id the lab compares is *qualified* with its
shard's index (``1/1718000000000-0``), and so is every charge's (its shard comes from its
``order_id``, by the producer's own rule :func:`solutions.shards.shard_of`). With one stream the
ids stay as Redis gives them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from labs.lab3.deliveries import PelEntry
from labs.lab3.probe import GroupState, entries, group_state, pel, pending_by_consumer, pending_ids
from labs.lab3.record import ChargeRow
from solutions.connection import is_busygroup
from solutions.ledger import read_rows
from solutions.shards import shard_of


@dataclass(frozen=True)
class CellStreams:
    """The keys of one cell's stream (``names``: one, or its shards in order) on ``client``."""

    client: redis.Redis  # through Sentinel, or a RedisCluster (see ClusterDeployment.client)
    names: tuple[str, ...]

    @property
    def sharded(self) -> bool:
        return len(self.names) > 1

    def qualify(self, index: int, msg_id: str) -> str:
        return f"{index}/{msg_id}" if self.sharded else msg_id

    def shard_index(self, order_id: str) -> int:
        return shard_of(order_id, len(self.names)) if self.sharded else 0

    def qualified_charges(self, rows: Iterable[ChargeRow]) -> list[ChargeRow]:
        """The charges with their ids qualified by the shard their ``order_id`` routes to."""
        if not self.sharded:
            return list(rows)
        return [replace(c, msg_id=self.qualify(self.shard_index(c.order_id), c.msg_id)) for c in rows]

    # -- the group ----------------------------------------------------------------------

    def create_group(self, group: str) -> None:
        """``XGROUP CREATE <key> <group> 0 MKSTREAM`` on every key; BUSYGROUP (it exists) is fine, nothing else is."""
        for name in self.names:
            try:
                self.client.xgroup_create(name, group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if not is_busygroup(exc):
                    raise

    def charged_ids(self, ledger: Path, consumer: str) -> set[str]:
        """The (qualified) ids of what ``consumer`` charged, from the ledger (none if no ledger yet)."""
        try:
            rows = read_rows(ledger, "SELECT msg_id, order_id FROM charges WHERE consumer = ?", (consumer,))
        except sqlite3.OperationalError:  # a lock held past the timeout: nothing seen this time
            return set()
        return {self.qualify(self.shard_index(str(o)), str(m)) for m, o in rows}

    def group_state(self, group: str) -> GroupState | None:
        """Pending, lag and length summed over the keys; the lag is unknown if one key's is; None without
        the group on some key. ``last_delivered_id`` is only meaningful for one stream."""
        states = [group_state(self.client, name, group) for name in self.names]
        if any(s is None for s in states):
            return None
        known = [s for s in states if s is not None]
        lags = [s.lag for s in known]
        lag = None if any(x is None for x in lags) else sum(x for x in lags if x is not None)
        last = known[0].last_delivered_id if not self.sharded else ""
        return GroupState(sum(s.pending for s in known), lag, last, sum(s.length for s in known))

    def consumers(self, group: str) -> set[str]:
        """The consumer names the group knows on any key."""
        names: set[str] = set()
        for name in self.names:
            with contextlib.suppress(redis.RedisError):
                names |= {str(c["name"]) for c in self.client.xinfo_consumers(name, group)}
        return names

    def pel(self, group: str, consumer: str | None = None) -> tuple[PelEntry, ...]:
        """Every pending entry of every key (qualified ids)."""
        out: list[PelEntry] = []
        for index, name in enumerate(self.names):
            out += [replace(e, msg_id=self.qualify(index, e.msg_id)) for e in pel(self.client, name, group, consumer)]
        return tuple(out)

    def pending_by_consumer(self, group: str) -> dict[str, int]:
        total: dict[str, int] = {}
        for name in self.names:
            for consumer, n in pending_by_consumer(self.client, name, group).items():
                total[consumer] = total.get(consumer, 0) + n
        return total

    # -- the entries ----------------------------------------------------------------------

    def entries(self) -> Iterator[tuple[str, dict[str, str]]]:
        """Every entry of every key, with qualified ids."""
        for index, name in enumerate(self.names):
            yield from ((self.qualify(index, i), f) for i, f in entries(self.client, name))

    def dlq_entries(self) -> Iterator[tuple[str, dict[str, str]]]:
        for name in self.names:
            yield from entries(self.client, f"{name}:dlq")

    def delivered(self, group: str) -> tuple[list[tuple[str, str]], set[str]]:
        """``([(qualified id, event_id) of every entry the group delivered], {qualified pending ids})``.

        Per key: the last delivered id first, then XPENDING, so that an entry acked in between
        shows as acked (it was charged before its ack)."""
        delivered: list[tuple[str, str]] = []
        pending: set[str] = set()
        for index, name in enumerate(self.names):
            state = group_state(self.client, name, group)
            keys_pending = pending_ids(self.client, name, group)
            last = state.last_delivered_id if state else "0-0"
            delivered += [(self.qualify(index, i), f.get("event_id", "")) for i, f in entries(self.client, name, last)]
            pending |= {self.qualify(index, m) for m in keys_pending}
        return delivered, pending
