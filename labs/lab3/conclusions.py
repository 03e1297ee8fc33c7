"""Lab 3's conclusions in words, each derived from the measured runs (none is written in advance).

A figure that contradicts what the course promises is called out as UNEXPECTED.
"""

from __future__ import annotations

from collections.abc import Sequence

from labs.lab3.measure import entered_twice
from labs.lab3.runner import Run
from labs.lab3.settings import VICTIM, Lab3Settings

STRATEGIES = ("none", "redis", "sqlite")


def _sum(runs: Sequence[Run], field: str) -> int:
    return sum(int(getattr(r.result, field) or 0) for r in runs)


def _pick(runs: Sequence[Run], variant: str, strategy: str | None = None) -> list[Run]:
    return [r for r in runs if r.variant == variant and (strategy is None or r.strategy == strategy)]


def _by_strategy(runs: Sequence[Run], field: str) -> dict[str, int]:
    present = [s for s in STRATEGIES if any(r.strategy == s for r in runs)]
    return {s: _sum([r for r in runs if r.strategy == s], field) for s in present}


def _listed(values: dict[str, int]) -> str:
    return ", ".join(f"{s} {n}" for s, n in values.items())


def wait_sentence(runs: Sequence[Run]) -> str | None:
    no_wait, wait = _pick(runs, "failover"), _pick(runs, "failover+wait")
    if not no_wait or not wait:
        return None
    a, b = _sum(no_wait, "missing_on_new_master"), _sum(wait, "missing_on_new_master")
    ca, cb = _sum(no_wait, "confirmed"), _sum(wait, "confirmed")
    text = (f"The failover itself lost {a} of {ca} confirmed writes without WAIT and {b} of {cb} with WAIT 1 "
            "(confirmed, then missing on the new master; counted apart from what the workers lost).")
    if b > 0:
        text += " UNEXPECTED: WAIT 1 should keep every confirmed write on the replica that gets promoted."
    elif a == 0:
        text += (" No difference showed this time: at 50 events/s the unreplicated tail at the kill is a few "
                 "milliseconds wide, so a loss without WAIT is rare; --repeat N gives it more chances.")
    text += (f" Sends of unknown outcome: {_sum(no_wait, 'unknown')} events without WAIT, {_sum(wait, 'unknown')} "
             f"with it, after {_sum(no_wait, 'resent')} and {_sum(wait, 'resent')} re-sends.")
    gap_wait = max((r.result.confirm_gap_s or 0.0) for r in wait)
    gap_no_wait = max((r.result.confirm_gap_s or 0.0) for r in no_wait)
    text += (f" The producer had no confirmed send for up to {gap_no_wait:.1f} s without WAIT and "
             f"{gap_wait:.1f} s with WAIT 1.")
    if gap_wait > gap_no_wait + 1.0:
        text += (" WAIT 1 costs availability here: the only replica was promoted, and until the old master "
                 "rejoined as a replica no write could be confirmed.")
    return text


def resend_sentence(runs: Sequence[Run]) -> str | None:
    fo = [r for r in runs if r.mode == "failover"]
    resent = _sum(fo, "resent")
    if not fo or not resent:
        return None
    twice = sum(len(entered_twice(r.record)) for r in fo)
    return (f"Around the failover the producer re-sent {resent} attempts of unknown or refused outcome with the same "
            f"event_id; {twice} events were charged from one entry and delivered again from another: duplicate "
            "deliveries the worker must absorb.")


def crash_sentence(runs: Sequence[Run]) -> str | None:
    crash = _pick(runs, "crash")
    if not crash:
        return None
    held = _by_strategy(crash, "crash_held")
    tries = max(r.result.crash_tries or 0 for r in crash)
    dupes = _by_strategy(crash, "duplicated")
    text = (f"Crash mode: kill -9 of {VICTIM} while it held charged, unacknowledged messages ({_listed(held)}; "
            f"caught within {tries} write pauses); the others reclaimed them after min idle. Events charged twice: "
            f"{_listed(dupes)}.")
    if held.get("none") and not dupes.get("none"):
        text += " UNEXPECTED: without dedupe a redelivered charged message should be charged again."
    if dupes.get("sqlite"):
        text += " UNEXPECTED: SQLite dedupe commits the charge and the applied_events row together."
    return text


def duplicates_sentence(runs: Sequence[Run]) -> str | None:
    deliveries = _by_strategy(runs, "duplicate_deliveries")
    if not deliveries:
        return None
    dupes = _by_strategy(runs, "duplicated")
    text = (f"Over every mode, duplicate deliveries (events delivered again after their charge): "
            f"{_listed(deliveries)}; events charged twice: {_listed(dupes)}.")
    if deliveries.get("none") and dupes.get("none"):
        text += " Without dedupe a duplicate delivery is a second charge;"
    if "sqlite" in dupes and not dupes["sqlite"] and deliveries.get("sqlite"):
        text += " with sqlite the charge and its applied_events row commit together, so none was charged twice."
    if dupes.get("sqlite"):
        text += " UNEXPECTED for sqlite: it commits the charge and the applied_events row in one transaction."
    if "redis" in dupes:
        text += (f" The Redis marker let {dupes['redis']} through" if dupes["redis"] else
                 " The Redis marker held this time") + " (it is lost with a failover that drops its SET)."
    return text


def sigterm_sentence(runs: Sequence[Run]) -> str | None:
    sig = _pick(runs, "sigterm")
    if not sig:
        return None
    bad = _sum(sig, "acked_not_done")
    codes = {e.get("code") for r in sig for e in r.result.exits if e.get("consumer") == VICTIM}
    drains = all(r.result.drain_complete > 0 for r in sig)
    if bad == 0 and codes == {0} and drains:
        return (f"SIGTERM left nothing acked that was not done ({len(sig)} {'run' if len(sig) == 1 else 'runs'}): "
                f"{VICTIM} wrote 'drain complete', exited 0, and its unacked work was picked up after the restart.")
    return (f"UNEXPECTED under SIGTERM: {bad} events acked but not done, exit codes {sorted(map(str, codes))}, "
            f"'drain complete' in every run: {drains}.")


def normal_sentence(runs: Sequence[Run], s: Lab3Settings) -> str | None:
    normal = _pick(runs, "normal")
    if not normal:
        return None
    lost, dupes = _sum(normal, "lost"), _sum(normal, "duplicated")
    text = (f"Normal mode: every {s.fail_every}th attempt fails; Redis showed {_sum(normal, 'failed_attempts')} "
            f"failed attempts (deliveries left unacknowledged for {s.stall_ms} ms or more), "
            f"{_sum(normal, 'failed_redelivered')} of them caught being delivered again (a redelivery done between two "
            f"samples of XPENDING goes unseen); {lost} lost and {dupes} duplicated.")
    if lost or dupes:
        text += " UNEXPECTED: without a fault nothing should be lost or charged twice."
    return text


def recovery_sentence(runs: Sequence[Run], s: Lab3Settings) -> str | None:
    fo = [r for r in runs if r.mode == "failover" and r.result.recover_first_charge_s is not None]
    if not fo:
        return None
    first = [r.result.recover_first_charge_s or 0.0 for r in fo]
    gaps = [r.result.downtime_s or 0.0 for r in fo]
    hard = s.failover == "hard"
    if any(r.record.shards for r in fo):  # on a cluster: one shard's master of every cell
        kind = "kill -9 of one shard's master" if hard else "CLUSTER FAILOVER of one shard's master"
        others = [d or 0.0 for r in fo for i, d in enumerate(r.result.shard_downtime_s) if i not in r.result.hit_shards]
        hit = [r.result.shard_downtime_s[i] or 0.0 for r in fo for i in r.result.hit_shards]
        return (f"After the {kind}, charging of new events resumed after {_span(first)} s; that shard paused "
                f"{_span(hit)} s, the other shards at most {max(others, default=0.0):.2f} s.")
    kind = "kill -9 of the master" if hard else "SENTINEL FAILOVER"
    return (f"After the {kind}, charging of new events resumed after {_span(first)} s; "
            f"the longest pause between charges was {_span(gaps)} s.")


def _span(values: Sequence[float]) -> str:
    """'2.4-3.4', or '2.4' when every value rounds alike (not '2.4-2.4')."""
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}-{high}"


def lost_sentence(runs: Sequence[Run]) -> str | None:
    lost = [r for r in runs if r.result.lost]
    text = "No run lost a confirmed event." if not lost else ""
    if lost:
        parts = []
        for r in lost:
            by_failover = r.result.lost_by_redis
            part = f"{r.variant}/{r.strategy} {r.result.lost}"
            if by_failover:
                part += f" ({by_failover} lost by the failover itself, {r.result.lost - by_failover} by the worker)"
            parts.append(part)
        text = "Confirmed events lost (neither charged nor dead-lettered): " + ", ".join(parts) + "."
    worker_side = [r for r in lost if r.result.lost > r.result.lost_by_redis]
    if any(r.strategy == "sqlite" for r in worker_side):
        text += " UNEXPECTED for sqlite: an event Redis delivered was acked without its charge."
    if any(r.strategy == "redis" for r in worker_side):
        text += (" With the redis marker such a loss fits its known weak spot: the marker outlived work that "
                 "was never done (its DEL went to the old master and was not replicated, or the worker died "
                 "between the marker and the work), so the redelivery was skipped as a duplicate.")
    refused = _sum(runs, "refused_but_charged")
    if refused:
        text += (f" UNEXPECTED: {refused} events the producer logged as refused were charged (a refusal means "
                 "the entry was not written).")
    return text


def conclusions(runs: Sequence[Run], s: Lab3Settings) -> list[str]:
    found = [normal_sentence(runs, s), crash_sentence(runs), wait_sentence(runs), resend_sentence(runs),
             duplicates_sentence(runs), recovery_sentence(runs, s), sigterm_sentence(runs), lost_sentence(runs)]
    return [text for text in found if text]
