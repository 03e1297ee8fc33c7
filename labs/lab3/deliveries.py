"""Deliveries as Redis saw them: what the lab reads from ``XPENDING`` samples, never from the worker.

The sampler takes ``XPENDING <stream> <group> - + N`` (the extended form: id, consumer, idle
time, delivery count) of every cell a few times a second. From those samples alone:

- a **failed attempt** is a delivery that Redis showed unacknowledged for at least
  ``stall_ms`` (half of the rescuer's min idle; the lab's work takes 50 ms). Counted once per
  (entry, delivery count): an entry that fails on its first and on its second delivery counts
  twice. In the fault modes, deliveries the fault interrupted count too;
- an entry was **delivered again** when, between two samples, its delivery count rose, its
  holder changed, or its idle time went back (XCLAIM, XAUTOCLAIM and a re-read of one's own
  pending entries all reset it);
- an entry **still pending after its charge** was charged in the ledger at least
  ``after_charge_s`` before a sample that showed it pending: its XACK was lost or never sent
  (a crash, a failover), so it will be delivered again although its work was done.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

IDLE_SLACK_MS = 300  # idle time that went back by more than this (beyond clock noise) was reset


@dataclass(frozen=True)
class PelEntry:
    """One row of ``XPENDING``'s extended form."""

    msg_id: str
    consumer: str
    idle_ms: int
    deliveries: int


@dataclass(frozen=True)
class PelSample:
    """The group's pending entries at time ``t`` (``entries`` is None when Redis did not answer)."""

    t: float
    entries: tuple[PelEntry, ...] | None


def _observations(samples: Sequence[PelSample]) -> dict[str, list[tuple[float, PelEntry]]]:
    seen: dict[str, list[tuple[float, PelEntry]]] = {}
    for sample in samples:
        for entry in sample.entries or ():
            seen.setdefault(entry.msg_id, []).append((sample.t, entry))
    return seen


def failed_attempts(samples: Sequence[PelSample], stall_ms: int) -> set[tuple[str, int]]:
    """``(msg_id, delivery count)`` of every delivery seen unacknowledged for ``stall_ms`` or more."""
    return {(e.msg_id, e.deliveries) for s in samples for e in s.entries or () if e.idle_ms >= stall_ms}


def _again(a: tuple[float, PelEntry], b: tuple[float, PelEntry]) -> bool:
    (ta, ea), (tb, eb) = a, b
    expected_ms = ea.idle_ms + (tb - ta) * 1000
    return eb.deliveries > ea.deliveries or eb.consumer != ea.consumer or eb.idle_ms < expected_ms - IDLE_SLACK_MS


def delivered_again(samples: Sequence[PelSample]) -> set[str]:
    """Entries that some pair of consecutive sightings shows delivered once more."""
    out = set()
    for msg_id, sightings in _observations(samples).items():
        if any(_again(a, b) for a, b in itertools.pairwise(sightings)):
            out.add(msg_id)
    return out


def pending_after_charge(samples: Sequence[PelSample], charged_at: Mapping[str, float],
                         after_charge_s: float = 1.0) -> set[str]:
    """Entries seen pending ``after_charge_s`` or more after their first charge (``charged_at`` by msg_id)."""
    out = set()
    for sample in samples:
        for entry in sample.entries or ():
            first = charged_at.get(entry.msg_id)
            if first is not None and sample.t >= first + after_charge_s:
                out.add(entry.msg_id)
    return out


def first_charges(rows: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``{msg_id: the earliest charged_at}`` from ``(msg_id, charged_at)`` rows."""
    first: dict[str, float] = {}
    for msg_id, t in rows:
        if msg_id not in first or t < first[msg_id]:
            first[msg_id] = t
    return first
