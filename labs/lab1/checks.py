"""Lab 1's checks, computed from the scenario's own records (never from the implementation's word).

* the workers ran without errors;
* ``XPENDING`` is empty at the end;
* nothing was lost: every event the producer holds an ``XADD`` ID for was processed;
* ``XACK`` came after the work: each message was still in the PEL when the work ran;
* each failure is paired with its reprocessing, and the rescuer's journal shows the pair.
"""

from __future__ import annotations

from collections import Counter

from labs.lab1.record import Handled, Journal, ScenarioResult
from labs.report import Check

SHOWN = 5


def _some(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def check_no_errors(result: ScenarioResult) -> Check:
    rec = result.recorder
    errors = [f"{e.worker}: {e.error}" for e in [*rec.errors, *rec.send_errors]]
    if not errors:
        return Check(
            "workers ran without errors", True, "no exception from the producer, consumers or rescuer"
        )
    return Check("workers ran without errors", False, f"{len(errors)} error(s): {_some(errors)}")


def check_pending_empty(result: ScenarioResult) -> Check:
    name = f"XPENDING {result.stream} {result.group} is empty at the end"
    if result.pending_end == 0:
        return Check(name, True, "0 pending entries")
    holders = ", ".join(f"{c}: {n}" for c, n in sorted(result.pending_end_by_consumer.items()))
    return Check(name, False, f"{result.pending_end} entries still pending ({holders}); nobody rescued them")


def check_nothing_lost(result: ScenarioResult) -> Check:
    rec = result.recorder
    name = "nothing lost (producer's log of acknowledged XADDs vs processed)"
    if not rec.sent:
        return Check(name, False, "the producer's log is empty: produce_one returned no message ID")
    processed = rec.processed_counters()
    lost = sorted(s.counter for s in rec.sent if s.counter not in processed)
    if not lost:
        return Check(name, True, f"{len(rec.sent)} acknowledged by XADD, all {len(rec.sent)} processed")
    return Check(
        name,
        False,
        f"{len(lost)} of {len(rec.sent)} acknowledged events were never processed: "
        f"{_some([f'#{c}' for c in lost])}",
    )


def check_ack_after_work(result: ScenarioResult) -> Check:
    name = "XACK only after the work (message still in the PEL while it is processed)"
    handled = result.recorder.handled
    early = [h for h in handled if not h.in_pel]
    if not handled:
        return Check(name, False, "the work was never called: consume_once must pass each message to handle")
    if not early:
        return Check(name, True, f"all {len(handled)} calls of the work found their message in the PEL")
    shown = [f"{h.worker} on #{h.counter} ({h.msg_id})" for h in early]
    return Check(
        name,
        False,
        f"{len(early)} of {len(handled)} messages were already acknowledged when the work ran, "
        f"e.g. {_some(shown)}: an XACK before processing turns every failure into a loss",
    )


def _paired(failure: Handled, handled: list[Handled], journal: list[Journal]) -> bool:
    redone = any(h.ok and h.counter == failure.counter and h.t_s >= failure.t_s for h in handled)
    logged = any(j.msg_id == failure.msg_id and j.from_consumer == failure.worker for j in journal)
    return redone and logged


def check_failures_paired(result: ScenarioResult) -> Check:
    rec = result.recorder
    name = "each failure paired with its reprocessing (journal: who took whose message)"
    failures = [h for h in rec.handled if not h.ok]
    if not failures:
        expected = len(rec.sent) // result.settings.fail_every
        return Check(name, False, f"no failure happened, {expected} expected: was every message handled?")
    unpaired = [f for f in failures if not _paired(f, rec.handled, rec.journal)]
    if unpaired:
        shown = [f"#{f.counter} failed in {f.worker}" for f in unpaired]
        return Check(
            name, False, f"{len(unpaired)} of {len(failures)} failures have no reprocessing: {_some(shown)}"
        )
    pairs = Counter(f"{j.from_consumer} -> {j.to_consumer}" for j in rec.journal if j.ok)
    summary = ", ".join(f"{pair}: {n}" for pair, n in sorted(pairs.items()))
    return Check(name, True, f"{len(failures)} failures, each reprocessed and journaled ({summary})")


def evaluate(result: ScenarioResult) -> list[Check]:
    """Every lab-1 check of one scenario run, in the order the lab states them."""
    return [
        check_no_errors(result),
        check_pending_empty(result),
        check_nothing_lost(result),
        check_ack_after_work(result),
        check_failures_paired(result),
    ]
