"""The drain experiments of notebook 07 against real Redis and real worker subprocesses."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from labs.experiments.drain import drain_line, drain_timeout_then_rescue, python_signal_default, sigterm_under_load

pytestmark = pytest.mark.timeout(90)


def test_drain_line_parses_the_last_one() -> None:
    log = (
        "x INFO drain complete in 0.1s: processed=3 left_pending=0\n"
        "y INFO drain complete in 0.3s: processed=8 acked=8 left_pending=2 ids=1-0,2-0\n"
    )
    line = drain_line(log)
    assert line is not None and line.left_pending == 2 and line.ids == ("1-0", "2-0")
    assert drain_line("no such line") is None


@pytest.mark.slow
def test_sigterm_under_load_acks_only_what_it_charged(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    run = sigterm_under_load(redis_url, f"{key_prefix}orders", tmp_path, backlog=200, rate=100)
    assert run.exit_code == 0
    assert run.drain is not None and run.drain.left_pending == 0
    assert run.in_hand_at_signal and run.in_hand_at_signal <= run.charged
    assert run.acked <= run.charged and not run.pending_after
    assert len(run.delivered) < run.stream_length  # it stopped reading


@pytest.mark.slow
@pytest.mark.parametrize("dedupe", ["sqlite", "redis", "redis-2phase"])
def test_drain_timeout_leaves_pending_and_the_rescuer_charges_once(
    redis_url: str, key_prefix: str, tmp_path: Path, dedupe: str
) -> None:
    """With ``redis`` the slow worker has marked every event it read before the deadline; the
    marks of the cancelled runs go with them, so the rescuer charges those events (before the
    fix it acked all of them as duplicates: 0 of 8 charged)."""
    run = drain_timeout_then_rescue(redis_url, f"{key_prefix}orders", tmp_path, events=8, in_hand=3,
                                    slow_handler_ms=1500, dedupe=dedupe)
    assert run.exit_code == 0
    assert run.drain is not None and run.drain.left_pending >= 3
    assert set(run.drain.ids) == run.pending_after_stop  # the log names exactly what stayed pending
    assert run.held_at_signal <= run.pending_after_stop
    assert run.reclaimed >= len(run.pending_after_stop)
    assert set(run.charges_per_event) == run.events and set(run.charges_per_event.values()) == {1}
    assert not run.pending_at_end


def test_python_without_handlers_dies_on_sigterm_but_unwinds_on_sigint() -> None:
    term = python_signal_default(signal.SIGTERM)
    assert term.returncode == -signal.SIGTERM and not term.cleanup_ran
    sigint = python_signal_default(signal.SIGINT)
    assert sigint.cleanup_ran and "KeyboardInterrupt" in sigint.output
