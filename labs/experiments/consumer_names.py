"""Consumer names (course module 3, section 3.1): the hard-coded name, host-pid, and its price.

- :func:`restart` : a process reads some entries and dies without acking; its successor
  starts under a name and, as a worker does on start, re-reads its own PEL (``0``) before
  reading new entries (``>``). With the same hard-coded name the dead process's entries are
  "glued" to the successor: one consumer, one PEL, old and new mixed. With host-pid names
  the dead process's entries stay under its own name, visible, for the rescuer.
- :func:`twins` : two live processes with the same name (a deployment scaled to two
  with one config): the second one's PEL re-read hands it the entries the first is still
  working on, and both handle them.
- :func:`restarts_pile_up` : the price of host-pid: every restart leaves one more
  consumer in ``XINFO CONSUMERS`` until someone runs ``XGROUP DELCONSUMER``.
- :func:`reap_idle_consumers` : the safe cleanup: delete only consumers that are idle and
  hold nothing (``DELCONSUMER`` throws the pending entries of a consumer away).

Tests in ``tests/test_consumer_names.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from labs.experiments.read_loop import GROUP, entry_ids, fresh_group


@dataclass(frozen=True)
class Restart:
    """What the group looks like after a process died holding entries and a successor started."""

    dead_held: list[str]
    successor_reread: list[str]  # what the successor's XREADGROUP ... 0 returned
    consumers: dict[str, int]  # XINFO CONSUMERS: name -> pending


def consumers(client: redis.Redis, stream: str) -> dict[str, int]:
    """``XINFO CONSUMERS``: name -> pending entries."""
    return {str(c["name"]): int(c["pending"]) for c in client.xinfo_consumers(stream, GROUP)}


def restart(client: redis.Redis, stream: str, *, dead: str, successor: str, held: int = 3, new: int = 2) -> Restart:
    """``dead`` reads ``held`` entries and dies; ``successor`` re-reads its PEL (``0``), then reads ``new``."""
    fresh_group(client, stream, held + new)
    dead_held = entry_ids(client.xreadgroup(GROUP, dead, {stream: ">"}, count=held))
    reread = entry_ids(client.xreadgroup(GROUP, successor, {stream: "0"}))
    client.xreadgroup(GROUP, successor, {stream: ">"}, count=new)
    return Restart(dead_held, reread, consumers(client, stream))


def twins(client: redis.Redis, stream: str, *, name: str = "billing-1", held: int = 3) -> tuple[list[str], list[str]]:
    """Two live processes named ``name``: (what the first is handling, what the second's re-read gives it)."""
    fresh_group(client, stream, held)
    first = entry_ids(client.xreadgroup(GROUP, name, {stream: ">"}, count=held))
    second = entry_ids(client.xreadgroup(GROUP, name, {stream: "0"}))
    return first, second


def restarts_pile_up(client: redis.Redis, stream: str, *, restarts: int, host: str = "host") -> dict[str, int]:
    """``restarts`` host-pid processes in turn, each reads one entry, acks it and exits; the consumers left."""
    fresh_group(client, stream, restarts)
    for pid in range(1000, 1000 + restarts):
        for msg_id in entry_ids(client.xreadgroup(GROUP, f"{host}-{pid}", {stream: ">"}, count=1)):
            client.xack(stream, GROUP, msg_id)
    return consumers(client, stream)


def delconsumer(client: redis.Redis, stream: str, name: str) -> int:
    """``XGROUP DELCONSUMER``: the number of pending entries that were dropped with the consumer."""
    return int(client.xgroup_delconsumer(stream, GROUP, name))


def reap_idle_consumers(client: redis.Redis, stream: str, *, min_idle_ms: int) -> list[str]:
    """Delete the consumers idle for ``min_idle_ms`` or more that hold no pending entries; their names."""
    reaped = []
    for info in client.xinfo_consumers(stream, GROUP):
        if int(info["pending"]) == 0 and int(info["idle"]) >= min_idle_ms:
            client.xgroup_delconsumer(stream, GROUP, str(info["name"]))
            reaped.append(str(info["name"]))
    return reaped
