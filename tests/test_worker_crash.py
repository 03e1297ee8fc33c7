"""labs.experiments.worker_crash: kill -9 inside the handler; which dedupe strategy keeps the work."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labs.experiments.worker_crash import charges_for, crash_and_rescue

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


@pytest.mark.parametrize(("dedupe", "effects"), [("redis", 0), ("redis-2phase", 1), ("sqlite", 1)])
def test_kill_inside_the_handler_then_rescue_and_resend(
    redis_url: str, key_prefix: str, tmp_path: Path, dedupe: str, effects: int
) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    run = asyncio.run(crash_and_rescue(redis_url, f"{key_prefix}orders", dedupe=dedupe, ledger=ledger))
    assert run.effects_at_crash == 0  # killed before the charge
    assert (run.effects, run.pending_left) == (effects, 0)


@pytest.mark.parametrize("dedupe", ["redis-2phase", "sqlite"])
def test_a_resend_beside_the_reclaimed_original_is_charged_once(
    redis_url: str, key_prefix: str, tmp_path: Path, dedupe: str
) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    run = asyncio.run(
        crash_and_rescue(redis_url, f"{key_prefix}orders", dedupe=dedupe, ledger=ledger, resend_while_pending=True)
    )
    assert (run.effects, run.pending_left) == (1, 0)


def test_charges_for_a_missing_ledger_is_zero(tmp_path: Path) -> None:
    assert charges_for(tmp_path / "none.sqlite3", "e") == 0
    (tmp_path / "empty.sqlite3").write_bytes(b"")
    assert charges_for(tmp_path / "empty.sqlite3", "e") == 0
