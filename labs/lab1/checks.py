"""Lab 1's checks, computed from the scenario's own records (never from the implementation's word).

Each check needs its situation to have happened: one whose situation did not arise says
**not exercised** and fails (the untouched starter reads nothing, so "XPENDING is empty"
proves nothing; a consumer that never sends XACK never shows an XACK after the work).

* the workers ran without errors (each distinct error once, with the command that raised it);
* ``XPENDING`` is empty at the end, after something was delivered;
* nothing was lost: every event the producer holds an ``XADD`` ID for was processed;
* ``XACK`` came after the work: each message was still pending *for the worker that processed
  it* when the work ran, and consumers did acknowledge what they processed;
* each processed message was acknowledged by its consumer (none processed twice) and
  ``consume_once`` returned how many it processed and acknowledged;
* each failure is paired with its reprocessing, journaled under the right owner with the
  delivery count Redis kept.
"""

from __future__ import annotations

from collections import Counter

from labs.lab1.record import Handled, Journal, ScenarioResult
from labs.report import Check

SHOWN = 5
NOT_EXERCISED = "not exercised: "
CONSUMERS = ("billing-1", "billing-2")


def _some(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def check_no_errors(result: ScenarioResult) -> Check:
    name = "workers ran without errors"
    rec = result.recorder
    errors = [*rec.errors, *rec.send_errors]
    if not errors:
        return Check(name, True, "no exception from the producer, consumers or rescuer")
    by_error: dict[str, list[str]] = {}
    for e in errors:
        by_error.setdefault(e.error, []).append(e.worker.split(" #")[0])
    parts = []
    for error, workers in by_error.items():
        who = ", ".join(f"{w} x{n}" if n > 1 else w for w, n in Counter(workers).items())
        parts.append(f"{error} [{who}]")
    return Check(name, False, f"{len(errors)} error(s), {len(by_error)} distinct: " + "; ".join(parts))


def _delivered(result: ScenarioResult) -> bool:
    return bool(result.recorder.handled)


def check_pending_empty(result: ScenarioResult) -> Check:
    name = f"XPENDING {result.stream} {result.group} is empty at the end"
    if not _delivered(result):
        return Check(name, False, NOT_EXERCISED + "no message was ever read from the group, so an empty PEL proves "
                                                  "nothing (consume_once must XREADGROUP and pass each to handle)")
    if result.pending_end == 0:
        return Check(name, True, "0 pending entries")
    holders = ", ".join(f"{c}: {n}" for c, n in sorted(result.pending_end_by_consumer.items()))
    return Check(name, False, f"{result.pending_end} entries still pending ({holders}); nobody rescued them")


def check_nothing_lost(result: ScenarioResult) -> Check:
    rec = result.recorder
    name = "nothing lost (producer's log of acknowledged XADDs vs processed)"
    if not rec.sent:
        return Check(name, False, NOT_EXERCISED + "the producer's log is empty: produce_one returned no message ID")
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


def _acked_by_consumer(handled: list[Handled]) -> list[Handled]:
    """Successes of a consumer that nobody handled again afterwards: its XACK removed them."""
    later: dict[int, float] = {}
    for h in handled:
        later[h.counter] = max(later.get(h.counter, h.t_s), h.t_s)
    return [h for h in handled if h.ok and h.worker in CONSUMERS and later[h.counter] == h.t_s]


def check_ack_after_work(result: ScenarioResult) -> Check:
    name = "XACK only after the work (message still pending for the worker while it is processed)"
    handled = result.recorder.handled
    if not handled:
        return Check(name, False, NOT_EXERCISED + "the work was never called: consume_once must pass each message "
                                                  "to handle")
    early = [h for h in handled if not h.in_pel]
    if early:
        shown = [f"{h.worker} on #{h.counter} ({h.msg_id})" for h in early]
        return Check(name, False, f"{len(early)} of {len(handled)} messages were already acknowledged when the work "
                     f"ran, e.g. {_some(shown)}: an XACK before processing turns every failure into a loss")
    other = [h for h in handled if h.owner is not None and h.owner != h.worker]
    if other:
        shown = [f"handle(..., worker={h.worker!r}) on #{h.counter}, held by {h.owner}" for h in other]
        return Check(name, False, f"{len(other)} calls named another worker than the consumer holding the message: "
                     f"{_some(shown)} (pass the consumer's own name: consume_once its consumer, rescue_once the "
                     "rescuer)")
    if not _acked_by_consumer(handled):
        return Check(name, False, NOT_EXERCISED + "no consumer ever acknowledged a message it processed (every one "
                                                  "came back through the rescuer): consume_once must XACK each success")
    return Check(name, True, f"all {len(handled)} calls of the work found their message pending for that worker")


def check_acknowledged(result: ScenarioResult) -> Check:
    name = "each processed message acknowledged by its consumer: none processed twice, consume_once counts it"
    rec = result.recorder
    mine = [h for h in rec.handled if h.ok and h.worker in CONSUMERS]
    if not mine:
        return Check(name, False, NOT_EXERCISED + "no consumer processed a message")
    successes = Counter(h.counter for h in rec.handled if h.ok)
    twice = sorted(c for c, n in successes.items() if n > 1)
    if twice:
        first = {h.counter: h.worker for h in reversed(rec.handled) if h.ok}
        shown = [f"#{c} (first by {first[c]})" for c in twice]
        return Check(name, False, f"{len(twice)} events processed twice: {_some(shown)}: processed, never "
                     "acknowledged, so the rescuer took them back after min idle and they were processed again")
    wrong = []
    for consumer in CONSUMERS:
        values = [r.value for r in rec.returns if r.worker == consumer]
        done = sum(1 for h in mine if h.worker == consumer)
        total = sum(v for v in values if isinstance(v, int))
        if any(not isinstance(v, int) for v in values) or total != done:
            odd = ", ".join(sorted({repr(v) for v in values if not isinstance(v, int)}))
            wrong.append(f"{consumer} processed and acked {done}, its calls returned {total} in all"
                         + (f" (and {odd})" if odd else ""))
    if wrong:
        return Check(name, False, "; ".join(wrong) + ": consume_once returns how many it processed and acknowledged")
    return Check(name, True, f"{len(mine)} messages processed once each and acknowledged by their consumers; "
                             "consume_once's returns add up to them")


def _paired(failure: Handled, handled: list[Handled], journal: list[Journal]) -> str | None:
    """None when the failure was redone and journaled right; else what is wrong."""
    if not any(h.ok and h.counter == failure.counter and h.t_s >= failure.t_s for h in handled):
        return "no reprocessing"
    entries = [j for j in journal if j.msg_id == failure.msg_id]
    if not entries:
        return "reprocessed, but no journal line"
    if not any(j.from_consumer == failure.worker for j in entries):
        return f"reprocessed, but journaled as taken from {entries[0].from_consumer}"
    redo = {h.msg_id: h.deliveries for h in handled if h.worker == entries[0].to_consumer and h.ok}
    right = redo.get(failure.msg_id)
    if right is not None and entries[0].deliveries != right:
        return f"journaled with deliveries={entries[0].deliveries}, Redis counted {right} after the claim"
    return None


def check_failures_paired(result: ScenarioResult) -> Check:
    rec = result.recorder
    name = "each failure paired with its reprocessing (journal: who took whose message, delivery count)"
    failures = [h for h in rec.handled if not h.ok]
    if not failures:
        expected = len(rec.sent) // result.settings.fail_every
        return Check(name, False, NOT_EXERCISED + f"no failure happened, {expected} expected: was every message "
                                                  "handled?")
    problems = [(f, why) for f in failures if (why := _paired(f, rec.handled, rec.journal))]
    if problems:
        shown = [f"#{f.counter} failed in {f.worker}: {why}" for f, why in problems]
        return Check(name, False, f"{len(problems)} of {len(failures)} failures: {_some(shown)}")
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
        check_acknowledged(result),
        check_failures_paired(result),
    ]
