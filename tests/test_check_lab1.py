"""check-lab-1: the reference passes, the starter and an ack-before-processing consumer fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.lab1 import check as check_lab1
from labs.lab1.impl import ImplError, load_impl
from labs.report import Check

ACK_FIRST = '''
"""A deliberately broken lab-1 implementation: the consumer acks before it processes."""
from solutions.lab1 import JournalEntry, ensure_group, produce_one, rescue_once  # noqa: F401


def consume_once(client, stream, group, consumer, handle, *, block_ms=2000, count=10):
    reply = client.xreadgroup(group, consumer, {stream: ">"}, count=count, block=block_ms)
    done = 0
    for _name, messages in reply or []:
        for msg_id, fields in messages:
            client.xack(stream, group, msg_id)  # the bug: XACK before the work
            try:
                handle(msg_id, fields, consumer)
            except Exception:
                continue
            done += 1
    return done
'''


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name.split(" (")[0].split(" lab1check")[0]: c for c in checks}


@pytest.mark.slow
def test_reference_passes_every_check(redis_url: str) -> None:
    checks = check_lab1.run_checks("solutions.lab1", redis_url)
    assert len(checks) == 8
    assert [c for c in checks if not c.passed] == []


@pytest.mark.slow
def test_ack_before_processing_fails_with_the_reason(redis_url: str, tmp_path: Path) -> None:
    broken = tmp_path / "ack_first.py"
    broken.write_text(ACK_FIRST)
    checks = _by_name(check_lab1.run_checks(str(broken), redis_url))
    ack = checks["XACK only after the work"]
    assert not ack.passed
    assert "already acknowledged when the work ran" in ack.detail
    assert "XACK before processing turns every failure into a loss" in ack.detail
    lost = checks["nothing lost"]
    assert not lost.passed and "never processed: #5, #10" in lost.detail
    assert not checks["each failure paired with its reprocessing"].passed
    # XPENDING is empty all the same: an empty PEL alone does not prove nothing was lost.
    assert checks["XPENDING"].passed


def test_cli_prints_fail_and_exits_1_for_the_starter(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = check_lab1.main(["--impl", "labs.lab1.starter", "--redis-url", redis_url])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out and "NotImplementedError" in out and "approximate MAXLEN" in out


def test_missing_functions_are_named(tmp_path: Path) -> None:
    partial = tmp_path / "partial.py"
    partial.write_text("def produce_one(*a, **k):\n    return '1-0'\n")
    with pytest.raises(ImplError, match="lacks ensure_group, consume_once, rescue_once"):
        load_impl(str(partial))
    with pytest.raises(ImplError, match="no such file"):
        load_impl(str(tmp_path / "absent.py"))
    with pytest.raises(ImplError, match="cannot import"):
        load_impl("no_such_module_for_lab1")
