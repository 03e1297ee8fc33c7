"""The figures of one cell, computed from its :class:`~labs.lab3.record.CellRecord`.

Definitions (the report repeats them):

- **sent / re-sent**: events the producer sent, and its extra attempts for events whose first
  attempt was unknown or refused (same ``event_id``); **confirmed / unknown / refused**: events
  by their best attempt (see ``billing-producer``);
- **lost**: confirmed by the producer, but neither charged nor dead-lettered;
- **duplicated**: events charged more than once (``charges`` is never deduplicated);
- **duplicate deliveries**: events delivered again after one delivery had done the work: an
  event charged from one stream entry and carried by another (a re-send of an unknown outcome:
  the other entry is charged too or in the final stream), or charged twice from one entry, or
  an entry Redis showed pending a
  second after the ledger charged it (an XACK lost in a failover or a crash), or one the crash
  mode killed the worker holding charged and unacknowledged. The dedupe step is exercised only
  when this is above 0;
- **failed attempts / redeliveries**: from the ``XPENDING`` samples (:mod:`labs.lab3.deliveries`);
- **downtime**: the longest gap between consecutive charges from the last charge before
  the fault until the producer stopped (without a fault: over the whole load);
- **recover, first charge**: fault -> first charge of an event sent after the fault (after a
  failover: sent after the promotion, since replies the old master wrote just before the
  kill still arrive in the first milliseconds after it);
- **recover, backlog**: fault -> first sample where pending and lag are back to their
  pre-fault maximum (under load they are never 0: work in flight and failures waiting
  for the rescuer);
- **confirm gap**: the longest gap between confirmed sends, measured like the downtime;
- **settle**: producer stopped -> pending = 0 and lag = 0;
- **missing on new master**: confirmed events that are not in the stream afterwards (with no
  MAXLEN, only a failover can remove a confirmed entry): writes the failover lost;
- **lost by the failover**: lost events that are also missing on the new master (no worker
  could have charged them); the rest of the lost are the worker's;
- **downtime per shard** (on a cluster): each shard's own downtime, its charges found by their
  ``order_id`` (the producer's ``shard_of``); the shard whose master the failover took away is
  the *hit* one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from labs.lab3.deliveries import delivered_again, failed_attempts, first_charges, pending_after_charge
from labs.lab3.record import CellRecord, Sample, event_outcomes
from labs.lab3.settings import VICTIM
from solutions.shards import shard_of

SHOWN = 5
WARMUP_S = 3.0


@dataclass
class CellResult:
    """One cell's row of the report (all JSON-able)."""

    mode: str
    strategy: str
    worker: str = ""
    attempted: int = 0
    resent: int = 0
    confirmed: int = 0
    unknown: int = 0
    refused: int = 0
    charged_once: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicate_deliveries: int = 0
    dead_lettered: int = 0
    failed_attempts: int = 0
    failed_redelivered: int = 0
    lost_after_failure: int = 0  # lost events whose entry was first seen failed and pending: acked later, not charged
    redeliveries: int = 0
    downtime_s: float | None = None
    recover_first_charge_s: float | None = None
    recover_backlog_s: float | None = None
    settle_s: float | None = None
    confirm_gap_s: float | None = None
    missing_on_new_master: int | None = None
    lost_by_redis: int = 0
    unknown_but_charged: int = 0
    refused_but_charged: int = 0
    pending_end: int = 0
    lag_end: int = 0
    drain_complete: int = 0
    acked_not_done: int | None = None
    crash_held: int | None = None
    crash_tries: int | None = None
    victim_charged_before_fault: int = 0
    lost_ids: list[str] = field(default_factory=list)
    duplicate_ids: list[str] = field(default_factory=list)
    missing_ids: list[str] = field(default_factory=list)
    acked_not_done_ids: list[str] = field(default_factory=list)
    exits: list[dict[str, object]] = field(default_factory=list)
    shard_downtime_s: list[float | None] = field(default_factory=list)  # on a cluster: per shard
    hit_shards: list[int] = field(default_factory=list)


def longest_gap(times: list[float], start: float, end: float) -> float | None:
    """The longest gap between consecutive times, from the last one before ``start`` to ``end``."""
    before = [t for t in times if t <= start]
    inside = [t for t in times if start < t <= end]
    points = ([before[-1]] if before else [start]) + inside
    if len(points) < 2:
        return end - start if end > start else None
    return max(b - a for a, b in itertools.pairwise(points))


def _backlog_recovered(samples: list[Sample], t0: float, fault_t: float, after: float) -> float | None:
    before = [s for s in samples if t0 + WARMUP_S <= s.t < fault_t and s.pending is not None and s.lag is not None]
    if not before:
        return None
    max_pending = max(s.pending or 0 for s in before)
    max_lag = max(s.lag or 0 for s in before)
    for s in samples:
        known = s.pending is not None and s.lag is not None
        if known and s.t >= after and (s.pending or 0) <= max_pending and 0 <= (s.lag or 0) <= max_lag:
            return s.t - fault_t
    return None


def _timing(r: CellRecord, res: CellResult, sent_after_fault: set[str]) -> None:
    times = [c.t for c in r.charges]
    start = r.fault_t if r.fault_t is not None else r.t0 + WARMUP_S
    res.downtime_s = longest_gap(times, start, r.produce_end)
    if r.shards:
        n = len(r.shards)
        times_by_shard: list[list[float]] = [[] for _ in range(n)]
        for c in r.charges:
            times_by_shard[shard_of(c.order_id, n)].append(c.t)
        res.shard_downtime_s = [longest_gap(t, start, r.produce_end) for t in times_by_shard]
        res.hit_shards = list(r.hit_shards)
    res.confirm_gap_s = longest_gap(sorted(s.t for s in r.sends if s.confirmed), start, r.produce_end)
    if r.settled_t is not None:
        res.settle_s = max(0.0, r.settled_t - r.produce_end)
    if r.fault_t is None:
        return
    firsts = [c.t for c in r.charges if c.event_id in sent_after_fault]
    if firsts:
        first = min(firsts)
        res.recover_first_charge_s = first - r.fault_t
        res.recover_backlog_s = _backlog_recovered(r.samples, r.t0, r.fault_t, first)


def entered_twice(r: CellRecord) -> set[str]:
    """Events charged from one stream entry and carried by another that was delivered too: the other
    entry is charged as well, or in the final stream (delivered: the group ends with lag 0). A re-send
    whose first entry the failover dropped after it was charged counts; one never charged does not."""
    charged: dict[str, set[str]] = {}
    for c in r.charges:
        charged.setdefault(c.event_id, set()).add(c.msg_id)
    return {e for e, ids in charged.items() if len(ids | set(r.stream_entries.get(e, ()))) > 1}


def _deliveries(r: CellRecord, res: CellResult, charged_twice: set[str]) -> set[str]:
    """Failed attempts, redeliveries and duplicate deliveries, from Redis's samples and the ledger;
    returns the IDs of the entries seen failed (unacknowledged for ``stall_ms`` or more).

    An event charged twice was delivered twice, from one entry (its XACK was lost) or from two;
    one delivered from two entries and charged once was absorbed by the dedupe."""
    failed = failed_attempts(r.pels, r.stall_ms)
    again = delivered_again(r.pels)
    res.failed_attempts, res.redeliveries = len(failed), len(again)
    res.failed_redelivered = len({m for m, _ in failed} & again)
    event_of = {c.msg_id: c.event_id for c in r.charges}
    late = pending_after_charge(r.pels, first_charges((c.msg_id, c.t) for c in r.charges))
    held = set(r.crash.held_after_kill) if r.crash else set()
    again_events = entered_twice(r) | charged_twice
    res.duplicate_deliveries = len(again_events | {event_of[m] for m in late | held if m in event_of})
    if r.crash is not None:
        res.crash_held, res.crash_tries = len(r.crash.held_after_kill), r.crash.tries
    return {m for m, _ in failed}


def measure(mode: str, strategy: str, r: CellRecord, worker: str = "") -> CellResult:
    """Every figure of the report for one cell."""
    res = CellResult(mode, strategy, worker)
    outcomes = event_outcomes(r.sends)
    confirmed = {e for e, o in outcomes.items() if o == "confirmed"}
    unknown = {e for e, o in outcomes.items() if o == "unknown"}
    refused = {e for e, o in outcomes.items() if o == "refused"}
    counts = Counter(c.event_id for c in r.charges)
    dead = set(r.dlq_events)
    res.attempted, res.resent = len(outcomes), sum(1 for s in r.sends if s.attempt > 1)
    res.confirmed, res.unknown, res.refused = len(confirmed), len(unknown), len(refused)
    res.charged_once = sum(1 for n in counts.values() if n == 1)
    lost = sorted(confirmed - set(counts) - dead)
    dupes = sorted(e for e, n in counts.items() if n > 1)
    res.lost, res.lost_ids = len(lost), lost[:SHOWN]
    res.duplicated, res.duplicate_ids = len(dupes), dupes[:SHOWN]
    res.dead_lettered = len(dead)
    res.unknown_but_charged = len(unknown & set(counts))
    res.refused_but_charged = len(refused & set(counts))
    res.pending_end, res.lag_end = r.pending_end, r.lag_end
    res.drain_complete = sum(1 for e in r.exits if e.get("drain_logged"))
    res.exits = r.exits
    failed_ids = _deliveries(r, res, set(dupes))
    res.lost_after_failure = sum(1 for e in lost if failed_ids & set(r.stream_entries.get(e, ())))
    if r.acked_not_done is not None:
        res.acked_not_done, res.acked_not_done_ids = len(r.acked_not_done), r.acked_not_done[:SHOWN]
    if r.fault_t is not None:
        res.victim_charged_before_fault = sum(1 for c in r.charges if c.t < r.fault_t and c.consumer == VICTIM)
    if mode == "failover":
        missing = sorted(confirmed - r.stream_events)
        res.missing_on_new_master, res.missing_ids = len(missing), missing[:SHOWN]
        res.lost_by_redis = len(set(lost) & set(missing))
        res.lost_ids = sorted(set(lost) - set(missing))[:SHOWN] or res.lost_ids
    since = r.promoted_t if r.promoted_t is not None else r.fault_t
    sent_after = {s.event_id for s in r.sends if since is not None and s.t > since and s.attempt == 1}
    _timing(r, res, sent_after)
    return res
