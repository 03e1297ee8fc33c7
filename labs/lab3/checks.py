"""Lab 3's checks, computed from the measured runs (the same for ``make lab-3`` and the checker).

* with ``sqlite`` dedupe: nothing lost and nothing charged twice, in every mode;
* XPENDING is empty and the lag is 0 at the end of every cell;
* SIGTERM: the worker logged ``drain complete`` and exited 0, and nothing was acked that
  was not done;
* failures were redelivered: every 7th attempt failed, and still nothing was lost
  (in ``normal``, for every strategy);
* after the failover, charging resumed: an event sent after the fault was charged.
"""

from __future__ import annotations

from collections.abc import Sequence

from labs.lab3.runner import Run
from labs.report import Check

SHOWN = 5


def _where(run: Run) -> str:
    return f"{run.variant}/{run.strategy}" + (f" (repeat {run.repeat})" if run.repeat > 1 else "")


def _some(items: Sequence[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def check_exactly_once(runs: Sequence[Run], strategy: str = "sqlite") -> Check | None:
    name = f"{strategy}: 0 lost and 0 duplicated in every mode (writes Redis itself dropped apart)"
    mine = [r for r in runs if r.strategy == strategy]
    if not mine:
        return None
    bad = [r for r in mine if r.result.lost > r.result.lost_by_redis or r.result.duplicated]
    dropped = sum(r.result.lost_by_redis for r in mine)
    apart = f"; {dropped} confirmed writes were dropped by Redis in the failover (see 'missing')" if dropped else ""
    if not bad:
        total = sum(r.result.confirmed for r in mine)
        return Check(name, True, f"{len(mine)} runs, {total} confirmed events, each charged exactly once "
                                 f"or dead-lettered{apart}")
    parts = []
    for r in bad:
        part = f"{_where(r)}: lost {r.result.lost - r.result.lost_by_redis}"
        if r.result.lost_ids:
            part += f" (event_id {', '.join(r.result.lost_ids)}{' ...' if r.result.lost > SHOWN else ''})"
        part += f", duplicated {r.result.duplicated}"
        if r.result.duplicate_ids:
            part += f" ({', '.join(r.result.duplicate_ids)})"
        parts.append(part)
    return Check(name, False, "; ".join(parts) + apart)


def check_nothing_lost_normal(runs: Sequence[Run]) -> Check | None:
    name = "normal: every 7th attempt failed, yet every confirmed event was charged or dead-lettered"
    normal = [r for r in runs if r.mode == "normal"]
    if not normal:
        return None
    bad = [f"{_where(r)}: {r.result.lost} lost, e.g. {', '.join(r.result.lost_ids)}" for r in normal if r.result.lost]
    if bad:
        return Check(name, False, "acked without doing the work: " + "; ".join(bad))
    redeliveries = [r.result.redeliveries for r in normal if r.result.redeliveries is not None]
    detail = f"{sum(r.result.confirmed for r in normal)} confirmed, 0 lost"
    if redeliveries:
        detail += f", {sum(redeliveries)} failed attempts redelivered (worker logs)"
    return Check(name, True, detail)


def check_pending_empty(runs: Sequence[Run]) -> Check:
    name = "XPENDING empty and lag 0 at the end of every run"
    bad = [f"{_where(r)}: pending {r.result.pending_end}, lag {r.result.lag_end}" for r in runs
           if r.result.pending_end != 0 or r.result.lag_end != 0]
    if bad:
        return Check(name, False, _some(bad))
    return Check(name, True, f"{len(runs)} runs, all drained")


def check_sigterm(runs: Sequence[Run]) -> Check | None:
    name = "SIGTERM: 'drain complete' logged, exit code 0, nothing acked that was not done"
    sig = [r for r in runs if r.mode == "sigterm"]
    if not sig:
        return None
    problems: list[str] = []
    for r in sig:
        first = next((e for e in r.result.exits if e.get("consumer") == "billing-2"), None)
        if first is None:
            problems.append(f"{_where(r)}: billing-2 never exited")
            continue
        if first.get("code") != 0:
            problems.append(f"{_where(r)}: billing-2 exited with {first.get('code')} ({first.get('signal')})")
        if r.result.drain_complete < 1:
            problems.append(f"{_where(r)}: no 'drain complete' in the worker logs")
        if r.result.acked_not_done:
            n = r.result.acked_not_done
            problems.append(f"{_where(r)}: {n} events acked but neither charged nor dead-lettered")
    if problems:
        return Check(name, False, "; ".join(problems))
    return Check(name, True, f"{len(sig)} runs: billing-2 drained and exited 0; 0 acked-but-not-done events")


def check_failover_recovered(runs: Sequence[Run], within_s: float = 20.0) -> Check | None:
    name = f"failover: charging resumed within {within_s:.0f} s (an event sent after the fault was charged)"
    fo = [r for r in runs if r.mode == "failover"]
    if not fo:
        return None
    slow = [f"{_where(r)}: {_seconds(r.result.recover_first_charge_s)}" for r in fo
            if r.result.recover_first_charge_s is None or r.result.recover_first_charge_s > within_s]
    if slow:
        return Check(name, False, _some(slow))
    worst = max(r.result.recover_first_charge_s or 0.0 for r in fo)
    return Check(name, True, f"{len(fo)} runs, the slowest resumed after {worst:.1f} s")


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def evaluate(runs: Sequence[Run]) -> list[Check]:
    """Every check of lab 3 that the runs can answer, in the order the task states them.

    A check whose mode (or strategy) did not run returns None and is left out, rather than
    shown as PASS.
    """
    checks = (check_nothing_lost_normal(runs), check_exactly_once(runs), check_pending_empty(runs),
              check_sigterm(runs), check_failover_recovered(runs))
    return [check for check in checks if check is not None]
