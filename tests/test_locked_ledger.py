"""labs.experiments.locked_ledger on real Redis and a real SQLite lock: what notebook 06's section 7 shows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labs.experiments.locked_ledger import locked_ledger_run

pytestmark = pytest.mark.timeout(60)


def test_a_locked_ledger_pauses_the_worker_and_dead_letters_nothing(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    run = asyncio.run(locked_ledger_run(redis_url, f"{key_prefix}store", tmp_path / "l.sqlite3"))
    assert run.finished and run.sent == 25
    assert run.hold_s * 1000 >= 5 * run.max_attempts * run.min_idle_ms  # far longer than the retry budget
    assert (run.charged, run.charged_twice, run.dead_lettered, run.pending_left) == (25, 0, 0, 0)
    assert run.pending_in_outage >= 1 and run.max_delivered_in_outage == 0, "failed charges gave the delivery back"
    assert run.unread_in_outage > 0, "the worker stopped reading while the store was down"
    assert [line.split(" (")[0].split(" after")[0] for line in run.store_log] == [
        "business store down", "business store back"], run.store_log
    assert "locked: database is locked (SQLITE_BUSY)" in run.store_log[0]
    assert run.counts.store_outages == 1 and run.counts.dead_lettered == 0
    assert 0 <= run.first_charge_after_s < 2.0, "charging resumed within about a second of the release"
