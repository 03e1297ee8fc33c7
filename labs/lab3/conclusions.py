"""Lab 3's conclusions in words, each derived from the measured runs (none is written in advance).

A figure that contradicts what the course promises is called out as UNEXPECTED.
"""

from __future__ import annotations

from collections.abc import Sequence

from labs.lab3.runner import Run
from labs.lab3.settings import Lab3Settings


def _sum(runs: Sequence[Run], field: str) -> int:
    return sum(int(getattr(r.result, field) or 0) for r in runs)


def _pick(runs: Sequence[Run], variant: str, strategy: str | None = None) -> list[Run]:
    return [r for r in runs if r.variant == variant and (strategy is None or r.strategy == strategy)]


def wait_sentence(runs: Sequence[Run]) -> str | None:
    no_wait, wait = _pick(runs, "failover"), _pick(runs, "failover+wait")
    if not no_wait or not wait:
        return None
    a, b = _sum(no_wait, "missing_on_new_master"), _sum(wait, "missing_on_new_master")
    ca, cb = _sum(no_wait, "confirmed"), _sum(wait, "confirmed")
    text = (f"Redis itself dropped {a} of {ca} confirmed writes in the failover without WAIT, "
            f"and {b} of {cb} with WAIT 1.")
    if b > 0:
        text += " UNEXPECTED: WAIT 1 should keep every confirmed write on the replica that gets promoted."
    elif a == 0:
        text += (" No difference showed this time: at 50 events/s the unreplicated tail at the kill is a few "
                 "milliseconds wide, so a loss without WAIT is rare; --repeat N gives it more chances.")
    unknown = _sum(wait, "unknown"), _sum(no_wait, "unknown")
    text += f" Sends of unknown outcome: {unknown[1]} without WAIT, {unknown[0]} with it."
    gap_wait = max((r.result.confirm_gap_s or 0.0) for r in wait)
    gap_no_wait = max((r.result.confirm_gap_s or 0.0) for r in no_wait)
    text += (f" The producer had no confirmed send for up to {gap_no_wait:.1f} s without WAIT and "
             f"{gap_wait:.1f} s with WAIT 1.")
    if gap_wait > gap_no_wait + 1.0:
        text += (" WAIT 1 costs availability here: the only replica was promoted, and until the old master "
                 "rejoined as a replica no write could be confirmed.")
    return text


def duplicates_sentence(runs: Sequence[Run]) -> str | None:
    fo = [r for r in runs if r.mode == "failover"]
    if not fo:
        return None
    by = {s: _sum([r for r in fo if r.strategy == s], "duplicated") for s in ("none", "redis", "sqlite")
          if any(r.strategy == s for r in fo)}
    text = "Around the failover, duplicate charges: " + ", ".join(f"{s} {n}" for s, n in by.items()) + "."
    if by.get("sqlite"):
        text += " UNEXPECTED: SQLite dedupe commits the charge and the applied_events row together."
    if "redis" in by and "sqlite" in by:
        if by["redis"] > by["sqlite"]:
            text += f" The Redis marker let {by['redis']} duplicates through; SQLite let {by['sqlite']}."
        else:
            text += " The Redis marker held this time (its marker and the XACK can still be lost together)."
    return text


def sigterm_sentence(runs: Sequence[Run]) -> str | None:
    sig = _pick(runs, "sigterm")
    if not sig:
        return None
    bad = _sum(sig, "acked_not_done")
    codes = {e.get("code") for r in sig for e in r.result.exits if e.get("consumer") == "billing-2"}
    drains = all(r.result.drain_complete > 0 for r in sig)
    if bad == 0 and codes == {0} and drains:
        return (f"SIGTERM left nothing acked that was not done ({len(sig)} runs): billing-2 logged "
                "'drain complete', exited 0, and its unacked work was picked up after the restart.")
    return (f"UNEXPECTED under SIGTERM: {bad} events acked but not done, exit codes {sorted(map(str, codes))}, "
            f"'drain complete' in every run: {drains}.")


def normal_sentence(runs: Sequence[Run], s: Lab3Settings) -> str | None:
    normal = _pick(runs, "normal")
    if not normal:
        return None
    lost, dupes = _sum(normal, "lost"), _sum(normal, "duplicated")
    re = _sum(normal, "redeliveries")
    text = (f"Normal mode: every {s.fail_every}th attempt failed and was redelivered ({re} failed attempts in "
            f"the worker logs, {_sum(normal, 'reclaimed')} reclaims); {lost} lost and {dupes} duplicated.")
    if lost or dupes:
        text += " UNEXPECTED: without a fault nothing should be lost or charged twice."
    return text


def recovery_sentence(runs: Sequence[Run], s: Lab3Settings) -> str | None:
    fo = [r for r in runs if r.mode == "failover" and r.result.recover_first_charge_s is not None]
    if not fo:
        return None
    first = [r.result.recover_first_charge_s or 0.0 for r in fo]
    gaps = [r.result.downtime_s or 0.0 for r in fo]
    kind = "kill -9 of the master" if s.failover == "hard" else "SENTINEL FAILOVER"
    return (f"After the {kind}, charging of new events resumed after {_span(first)} s; "
            f"the longest pause between charges was {_span(gaps)} s.")


def _span(values: Sequence[float]) -> str:
    """'2.4-3.4', or '2.4' when every value rounds alike (not '2.4-2.4')."""
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}-{high}"


def lost_sentence(runs: Sequence[Run]) -> str | None:
    lost = [r for r in runs if r.result.lost]
    if not lost:
        return "No run lost a confirmed event."
    parts = []
    for r in lost:
        by_redis = r.result.lost_by_redis
        part = f"{r.variant}/{r.strategy} {r.result.lost}"
        if by_redis:
            part += f" ({by_redis} of them dropped by Redis itself, {r.result.lost - by_redis} by the worker)"
        parts.append(part)
    text = "Confirmed events lost (neither charged nor dead-lettered): " + ", ".join(parts) + "."
    worker_side = [r for r in lost if r.result.lost > r.result.lost_by_redis]
    if any(r.strategy == "sqlite" for r in worker_side):
        text += " UNEXPECTED for sqlite: an event Redis delivered was acked without its charge."
    if any(r.strategy == "redis" for r in worker_side):
        text += (" With the redis marker such a loss fits its known weak spot: the marker outlived work that "
                 "was never done (its DEL went to the old master and was not replicated, or the worker died "
                 "between the marker and the work), so the redelivery was skipped as a duplicate.")
    return text


def conclusions(runs: Sequence[Run], s: Lab3Settings) -> list[str]:
    found = [normal_sentence(runs, s), wait_sentence(runs), duplicates_sentence(runs), recovery_sentence(runs, s),
             sigterm_sentence(runs), lost_sentence(runs)]
    return [text for text in found if text]
