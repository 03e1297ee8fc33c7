"""Sharded streams on Redis Cluster: shard names, the tags that spread them, and the one routing rule.

A stream is one key, so one slot, so one master: on a cluster a stream ``orders`` that must use
every master becomes N shards ``orders:{<tag>}``. The tag in braces is the hash tag: only it is
hashed, so the tag alone decides the slot (and a shard's DLQ, markers and leases, which carry
the same tag, share that slot and every script on them stays single-slot).

The tags are chosen from ``CLUSTER SLOTS`` (:func:`plan_tags`): shard *i* goes to the *i*-th
master round robin, and its tag is the first of the strings ``"i"``, ``"i-1"``, ``"i-2"`` ... (names,
not subtraction: shard 2 tries ``"2"``, ``"2-1"``, ``"2-2"``) whose slot that master serves and no
earlier shard took. Naive tags ``0 .. N-1`` do not spread: on the lab cluster ``{0}``, ``{1}``,
``{2}`` hash to slots 13907, 9842 and 5649, two shards on the second master and none on the
first.

An event goes to shard ``shard_of(key, N) = crc32(key) mod N`` (zlib's CRC-32, the same as
Go's ``crc32.ChecksumIEEE``), stable across processes and languages, unlike Python's salted
``hash()``. The producer routes by ``order_id`` with it, so one order's events stay in one
shard, in order.

**The shard set is fixed for the stream's life**, as a Kafka topic's partitions are: change N
and ``crc32 mod N`` sends an order's next events to another shard, where another consumer
may handle them before the old shard's backlog, and per-key order is gone. Scaling out moves
shards to new masters (a reshard moves a slot with its stream, group and PEL); it never
renames or re-splits them. So the set is chosen once and stored where every process finds
it: the registry key ``<stream>:shards`` (JSON ``{"tags": [...]}``), written with ``SET NX``
by the first process and only read afterwards; a process that asks for another N gets a
:class:`ShardCountError`. Deriving the tags again at every start would not do: they depend
on the slot layout at that moment, and after a reshard the same rule gives other names.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.crc import key_slot

from solutions.settings import InputError, Settings

if TYPE_CHECKING:
    from solutions.cluster_router import ClusterRouter

SlotRange = tuple[int, int]
MAX_CANDIDATES = 100_000


class ShardCountError(ValueError):
    """The stream already has a shard set of another size; it cannot change."""


class ShardRegistryError(InputError):
    """``<stream>:shards`` holds something that is not a shard set (``{"tags": [distinct strings]}``)."""


def parse_registry(key: str, raw: str | bytes) -> list[str]:
    """The tags stored in the registry key, or :class:`ShardRegistryError` saying what is wrong."""
    try:
        tags = json.loads(raw)["tags"]
    except (ValueError, KeyError, TypeError):
        tags = None
    if (not isinstance(tags, list) or not tags or not all(isinstance(t, str) and t for t in tags)
            or len(set(tags)) != len(tags)):
        shown = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        raise ShardRegistryError(f"{key} does not hold a shard set (expected JSON {{\"tags\": [...]}} with "
                                 f"distinct tags, found {shown[:80]!r}); delete it if nothing uses it")
    return tags


def shard_name(stream: str, tag: str) -> str:
    """``orders`` + ``0`` -> ``orders:{0}``."""
    return f"{stream}:{{{tag}}}"


def slot_of(key: str) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag, mod 16384), as ``CLUSTER KEYSLOT`` says."""
    return int(key_slot(key.encode()))


def shard_of(key: str, n_shards: int) -> int:
    """The shard index of a routing key (an ``order_id``): ``crc32(key) mod n_shards``."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    return zlib.crc32(key.encode()) % n_shards


def naive_tags(n_shards: int) -> list[str]:
    """``0 .. N-1``: what one would write first, and what does not spread over the masters."""
    return [str(i) for i in range(n_shards)]


def plan_tags(stream: str, n_shards: int, masters: Sequence[Sequence[SlotRange]]) -> list[str]:
    """Tags that put shard *i* on master ``i mod M`` (masters given by their slot ranges, in slot order).

    Each tag is the first of the strings ``"i"``, ``"i-1"``, ``"i-2"`` ... whose slot the wanted
    master serves and that no earlier shard took, so that each shard can later move alone.
    """
    if n_shards < 1 or not masters:
        raise ValueError("need n_shards >= 1 and at least one master with slots")
    used: set[int] = set()
    tags = []
    for i in range(n_shards):
        ranges = masters[i % len(masters)]
        for k in range(MAX_CANDIDATES):
            tag = str(i) if k == 0 else f"{i}-{k}"
            slot = slot_of(shard_name(stream, tag))
            if slot not in used and any(lo <= slot <= hi for lo, hi in ranges):
                used.add(slot)
                tags.append(tag)
                break
        else:
            raise ValueError(f"no free slot found for shard {i} on master {i % len(masters)}")
    return tags


@dataclass(frozen=True)
class ShardSet:
    """A stream's fixed shards: ``names[i]`` is shard *i*."""

    stream: str
    tags: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(shard_name(self.stream, tag) for tag in self.tags)

    def __len__(self) -> int:
        return len(self.tags)

    def shard_for(self, key: str) -> str:
        """The shard a routing key (an ``order_id``) belongs to."""
        return self.names[shard_of(key, len(self.tags))]


@dataclass(frozen=True)
class ShardKeys:
    """Every key the worker uses for one shard; all carry the shard's hash tag, so one slot."""

    stream: str
    dlq: str
    rescuer_lease: str
    marker_prefix: str  # + the dedupe key (event_id) = a marker of the redis / redis-2phase strategies


def shard_settings(base: Settings, shard: str) -> Settings:
    """The worker's settings for one shard: the same, with ``stream`` set to the shard's name."""
    return dataclasses.replace(base, stream=shard)


def shard_keys(shard: str, group: str) -> ShardKeys:
    """The names a worker derives from ``stream=shard`` (DLQ, rescuer lease, dedupe markers)."""
    s = Settings(stream=shard, group=group, consumer="-")
    return ShardKeys(stream=shard, dlq=s.dlq_stream, rescuer_lease=s.rescuer_lease_key, marker_prefix=s.dedupe_prefix)


def registry_key(stream: str) -> str:
    """Where a stream's shard set is kept: ``<stream>:shards``."""
    return f"{stream}:shards"


async def ensure_shards(router: ClusterRouter, stream: str, n_shards: int | None = None) -> ShardSet:
    """The stream's shard set: read from the registry, or planned from ``CLUSTER SLOTS`` and stored once.

    ``GET <stream>:shards``; when absent and ``n_shards`` is given, the tags are planned over
    the masters the router knows and stored with ``SET NX`` (a process that loses that race
    reads the winner's). ``n_shards`` None means "whatever is registered".
    """
    key = registry_key(stream)
    client = router.client(key)
    raw = await client.get(key)
    if raw is None:
        if n_shards is None:
            raise ShardCountError(f"no shards registered for {stream!r} (in {key}); give the number of shards")
        layout = list(router.masters().values())  # in slot order
        tags = plan_tags(stream, n_shards, layout)
        if not await client.set(key, json.dumps({"tags": tags}), nx=True):
            raw = await client.get(key)
    if raw is not None:
        tags = parse_registry(key, raw)
    if n_shards is not None and len(tags) != n_shards:
        raise ShardCountError(
            f"{stream!r} has {len(tags)} shards (fixed for its life, in {key}); {n_shards} cannot change that"
        )
    return ShardSet(stream, tuple(tags))
