"""Lab 3's checks, computed from the measured runs (the same for ``make lab-3`` and the checker).

Every check needs its situation to have happened. One whose situation did not arise says
**not exercised** and fails: a worker that never fails, never gets a duplicate or never has
work in hand cannot pass by default. A check whose mode (or strategy) did not run at all is
left out. Every figure comes from a record the worker does not write (:mod:`labs.lab3.record`).

1. normal: failed attempts happened (Redis showed deliveries left unacknowledged), Redis
   delivered them again, and every confirmed event was charged or dead-lettered;
2. crash: ``billing-2`` was killed holding charged, unacknowledged messages, and the others
   took its messages over (nothing left pending; nothing lost, except by the ``redis`` marker,
   whose known weak spot this is);
3. sqlite: nothing lost and nothing charged twice in any mode (confirmed writes the failover
   itself lost are counted apart);
4. sqlite: the dedupe step was exercised: events were delivered again after their charge
   (crash, producer re-sends, failover), and none was charged twice;
5. XPENDING is empty and the lag 0 at the end of every cell, and something was charged;
6. SIGTERM: ``billing-2`` had work, wrote ``drain complete``, exited 0, acked nothing it did not do;
7. failover: an event sent after the fault was charged within 20 s;
8. failover on a cluster: the shards whose master was not touched never stopped charging for
   more than a second (each shard's downtime, from the ledger).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from labs.lab3.runner import Run
from labs.lab3.settings import VICTIM
from labs.report import Check

SHOWN = 5
NOT_EXERCISED = "not exercised: "
DUPLICATE_MODES = ("crash", "failover")


def _where(run: Run) -> str:
    return f"{run.variant}/{run.strategy}" + (f" (repeat {run.repeat})" if run.repeat > 1 else "")


def _some(items: Sequence[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def _ids(ids: Sequence[str], total: int) -> str:
    return f" (event_id {', '.join(ids)}{' ...' if total > len(ids) else ''})" if ids else ""


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def check_failures_redelivered(runs: Sequence[Run]) -> Check | None:
    name = "normal: failed attempts were redelivered, and every confirmed event was charged or dead-lettered"
    normal = [r for r in runs if r.mode == "normal"]
    if not normal:
        return None
    lost = [f"{_where(r)}: {r.result.lost} lost{_ids(r.result.lost_ids, r.result.lost)}"
            for r in normal if r.result.lost]
    if lost:
        return Check(name, False, _loss_cause(normal) + "; ".join(lost))
    idle = [r for r in normal if r.result.failed_attempts == 0]
    if idle:
        stall = idle[0].record.stall_ms
        return Check(name, False, NOT_EXERCISED + f"{', '.join(_where(r) for r in idle)}: Redis never showed a "
                     f"delivery left unacknowledged for {stall} ms or more, so no attempt failed (the worker must fail "
                     "every --fail-every-th attempt and leave that message unacknowledged for the rescuer)")
    unseen = [r for r in normal if r.result.failed_redelivered == 0]
    if unseen:
        return Check(name, False, f"{', '.join(_where(r) for r in unseen)}: attempts failed, but Redis never showed "
                     "one delivered again (its delivery count, holder and idle time never changed): the rescuer "
                     "(XAUTOCLAIM after min idle) must take them over")
    failed = sum(r.result.failed_attempts for r in normal)
    again = sum(r.result.failed_redelivered for r in normal)
    confirmed = sum(r.result.confirmed for r in normal)
    return Check(name, True, f"{failed} failed attempts seen in XPENDING, {again} of them caught being delivered again "
                 "(a redelivery finished between two XPENDING samples is not seen: that is no loss); "
                 f"{confirmed} confirmed events, 0 lost")


def _loss_cause(runs: Sequence[Run]) -> str:
    """What lost the events: the rescuer, when every lost one had failed and waited in the PEL first."""
    lossy = [r for r in runs if r.result.lost]
    if lossy and all(r.result.lost_after_failure >= r.result.lost for r in lossy):
        return ("the rescuer acks failed work: every lost event had failed and waited in the PEL, then was acked "
                "without a charge (a claimed message whose attempt fails must stay pending for the next rescue): ")
    return "acked without doing the work: "


def check_crash_taken_over(runs: Sequence[Run]) -> Check | None:
    name = f"crash: kill -9 of {VICTIM} while it held charged, unacknowledged messages; the others took them over"
    crash = [r for r in runs if r.mode == "crash"]
    if not crash:
        return None
    never = [r for r in crash if not r.result.crash_held]
    if never:
        tries = max(r.result.crash_tries or 0 for r in never)
        return Check(name, False, NOT_EXERCISED + f"{', '.join(_where(r) for r in never)}: in {tries} write pauses "
                     f"{VICTIM} never held a message that was charged in the ledger and still pending in Redis "
                     "(does it XACK before the charge, or charge under another consumer name?)")
    # The redis marker may lose work here by design (the worker died between its SET NX and the work,
    # so the redelivery skips it): the conclusions explain it; none and sqlite must lose nothing.
    bad = [f"{_where(r)}: {r.result.lost} lost{_ids(r.result.lost_ids, r.result.lost)}, pending at the end "
           f"{r.result.pending_end}" for r in crash
           if (r.result.lost and r.strategy != "redis") or r.result.pending_end]
    if bad:
        return Check(name, False, "; ".join(bad))
    held = sum(r.result.crash_held or 0 for r in crash)
    tries = max(r.result.crash_tries or 0 for r in crash)
    marker = sum(r.result.lost for r in crash if r.strategy == "redis")
    known = (f"; the redis marker lost {marker} (set before work the kill cut short: its known weak spot)"
             if marker else "")
    return Check(name, True, f"{_runs(len(crash))}: {held} charged, unacknowledged messages at the kill (caught within "
                 f"{tries} write pauses); the others finished all of them, nothing left pending{known}")


def check_exactly_once(runs: Sequence[Run], strategy: str = "sqlite") -> Check | None:
    name = f"{strategy}: nothing lost and nothing charged twice in any mode (confirmed writes the failover lost apart)"
    mine = [r for r in runs if r.strategy == strategy]
    if not mine:
        return None
    bad = [r for r in mine if r.result.lost > r.result.lost_by_redis or r.result.duplicated]
    dropped = sum(r.result.lost_by_redis for r in mine)
    apart = (f"; {dropped} confirmed writes were lost by the failover itself (never on the new master: see "
             "'missing on new master')") if dropped else ""
    if bad:
        parts = [f"{_where(r)}: lost {r.result.lost - r.result.lost_by_redis}{_ids(r.result.lost_ids, r.result.lost)}, "
                 f"duplicated {r.result.duplicated}{_ids(r.result.duplicate_ids, r.result.duplicated)}" for r in bad]
        return Check(name, False, "; ".join(parts) + apart)
    total = sum(r.result.confirmed for r in mine)
    return Check(name, True, f"{_runs(len(mine))}, {total} confirmed events, each charged exactly once or "
                             f"dead-lettered{apart}")


def check_dedupe_exercised(runs: Sequence[Run], strategy: str = "sqlite") -> Check | None:
    name = f"{strategy}: dedupe held: events were delivered again after their charge, and none was charged twice"
    mine = [r for r in runs if r.strategy == strategy]
    if not any(r.mode in DUPLICATE_MODES for r in mine):
        return None
    twice = [r for r in mine if r.result.duplicated]
    if twice:
        parts = [f"{_where(r)}: {r.result.duplicated} events charged twice"
                 f"{_ids(r.result.duplicate_ids, r.result.duplicated)}" for r in twice]
        return Check(name, False, "; ".join(parts) + " (the dedupe step let a redelivery charge again)")
    by_mode = {r.variant: r.result.duplicate_deliveries for r in mine if r.result.duplicate_deliveries}
    if not by_mode:
        return Check(name, False, NOT_EXERCISED + "no event was delivered again after its charge (no crash between a "
                     "charge and its XACK, no producer re-send reached the stream), so the dedupe step never ran")
    text = ", ".join(f"{variant} {n}" for variant, n in by_mode.items())
    return Check(name, True, f"{sum(by_mode.values())} duplicate deliveries ({text}), each absorbed: 0 charged twice")


def check_pending_empty(runs: Sequence[Run]) -> Check:
    name = "XPENDING empty and lag 0 at the end of every run"
    bad = [f"{_where(r)}: pending {r.result.pending_end}, lag {r.result.lag_end}" for r in runs
           if r.result.pending_end != 0 or r.result.lag_end != 0]
    if bad:
        return Check(name, False, _some(bad))
    idle = [_where(r) for r in runs if not r.record.charges]
    if idle:
        return Check(name, False, NOT_EXERCISED + f"nothing was ever charged in {_some(idle)}")
    return Check(name, True, f"{_runs(len(runs))}, all drained")


def _sigterm_problems(r: Run) -> list[str]:
    first = next((e for e in r.result.exits if e.get("consumer") == VICTIM), None)
    if first is None:
        return [f"{_where(r)}: {VICTIM} never exited"]
    problems = []
    if first.get("code") != 0:
        problems.append(f"{_where(r)}: {VICTIM} exited with {first.get('code')} ({first.get('signal')})")
    if not first.get("drain_logged"):
        problems.append(f"{_where(r)}: {VICTIM} wrote no line containing 'drain complete' before it exited")
    if r.result.acked_not_done:
        ids = ", ".join(r.result.acked_not_done_ids)
        problems.append(f"{_where(r)}: {r.result.acked_not_done} events acked but neither charged nor "
                        f"dead-lettered (event_id {ids})")
    return problems


def check_sigterm(runs: Sequence[Run]) -> Check | None:
    name = f"SIGTERM: {VICTIM} drained ('drain complete' written, exit code 0), nothing acked that was not done"
    sig = [r for r in runs if r.mode == "sigterm"]
    if not sig:
        return None
    idle = [_where(r) for r in sig if not r.result.victim_charged_before_fault]
    if idle:
        return Check(name, False, NOT_EXERCISED + f"{VICTIM} had charged nothing before the SIGTERM in {_some(idle)}")
    problems = [p for r in sig for p in _sigterm_problems(r)]
    if problems:
        return Check(name, False, "; ".join(problems))
    return Check(name, True, f"{_runs(len(sig))}: {VICTIM} drained, exited 0, 0 acked without the work")


def _resume_bound_s(r: Run, within_s: float) -> float:
    """Seconds after the fault by which an event sent after it must be charged: ``within_s``; for ``+wait``
    (``WAIT 1`` with the one replica the topology has) ``within_s`` after the old master is back as a
    replica, since nothing can be confirmed before (a loaded CI machine brought it back 20 s late)."""
    back, fault = r.record.replica_back_t, r.record.fault_t
    if r.variant.endswith("+wait") and back is not None and fault is not None:
        return max(within_s, back - fault + within_s)
    return within_s


def check_failover_recovered(runs: Sequence[Run], within_s: float = 20.0) -> Check | None:
    name = (f"failover: charging resumed within {within_s:.0f} s (an event sent after the fault was charged; "
            "with +wait, after the old master was back as a replica)")
    fo = [r for r in runs if r.mode == "failover"]
    if not fo:
        return None
    if any(r.record.promoted_t is None for r in fo):
        return Check(name, False, NOT_EXERCISED + "no new master was promoted (see the phases table)")
    slow = [f"{_where(r)}: {_seconds(r.result.recover_first_charge_s)} (bound {_resume_bound_s(r, within_s):.1f} s)"
            for r in fo if r.result.recover_first_charge_s is None
            or r.result.recover_first_charge_s > _resume_bound_s(r, within_s)]
    if slow:
        return Check(name, False, _some(slow))
    worst = max(r.result.recover_first_charge_s or 0.0 for r in fo)
    return Check(name, True, f"{_runs(len(fo))}, the slowest resumed after {worst:.1f} s")


def check_other_shards_kept_charging(runs: Sequence[Run], within_s: float = 1.0) -> Check | None:
    """The shards whose master stayed kept charging: no stop longer than ``within_s``, or than half the stop of the
    shard whose master failed over when that was longer (a loaded machine stretches every pause alike: CI saw
    1.29 s beside a 2.9 s failover)."""
    name = (f"failover on a cluster: the shards whose master stayed kept charging (no stop over {within_s:g} s, "
            "or over half the failed-over shard's)")
    fo = [r for r in runs if r.mode == "failover" and r.result.shard_downtime_s]
    if not fo:
        return None
    unhit = [r for r in fo if not r.result.hit_shards]
    if unhit:
        return Check(name, False, NOT_EXERCISED + f"{', '.join(_where(r) for r in unhit)}: no shard's master was "
                     "taken away (see the phases table)")
    worst: list[tuple[float, str]] = []
    slow: list[str] = []
    for r in fo:
        others = [(d if d is not None else float("inf"), i) for i, d in enumerate(r.result.shard_downtime_s)
                  if i not in r.result.hit_shards]
        longest, shard = max(others)
        hit_stop = max((r.result.shard_downtime_s[i] or 0.0) for i in r.result.hit_shards)
        said = "never charged" if longest == float("inf") else f"stopped {longest:.2f} s"
        if longest > max(within_s, hit_stop / 2):
            slow.append(f"{_where(r)}: shard {shard} {said} (the failed-over one {hit_stop:.2f} s)")
        worst.append((longest, f"{_where(r)}: shard {shard} {said}"))
    if slow:
        return Check(name, False, _some(slow))
    hit = max(max((r.result.shard_downtime_s[i] or 0.0) for i in r.result.hit_shards) for r in fo)
    return Check(name, True, f"{_runs(len(fo))}: the others' longest stop {max(w for w, _ in worst):.2f} s, while the "
                 f"shard whose master failed over waited up to {hit:.1f} s")


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


CHECKS: tuple[Callable[[Sequence[Run]], Check | None], ...] = (
    check_failures_redelivered, check_crash_taken_over, check_exactly_once, check_dedupe_exercised,
    check_pending_empty, check_sigterm, check_failover_recovered, check_other_shards_kept_charging,
)


def evaluate(runs: Sequence[Run]) -> list[Check]:
    """Every check of lab 3 that the runs can answer, in the order the task states them.

    With several workers under test, each worker's runs are checked on their own and every
    check's name starts with ``[worker]``.
    """
    workers = list(dict.fromkeys(r.worker for r in runs))
    out: list[Check] = []
    for worker in workers:
        mine = [r for r in runs if r.worker == worker]
        for check in (fn(mine) for fn in CHECKS):
            if check is not None:
                out.append(Check(f"[{worker}] {check.name}", check.passed, check.detail) if len(workers) > 1
                           else check)
    return out
