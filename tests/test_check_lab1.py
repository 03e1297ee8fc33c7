"""check-lab-1: the reference passes; the starter, an ack-first, a never-acking consumer and
implementations with one slip each fail, every one naming its fault, none passing vacuously.

The broken implementations are the reference (``solutions/lab1.py``) with one change each, so
a failure can only come from that change. Four of them run side by side (threads, each on
keys of its own) to keep the suite short.
"""

from __future__ import annotations

import inspect
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from labs.lab1 import check as check_lab1
from labs.lab1.impl import ImplError, load_impl
from labs.report import Check
from solutions import lab1

REFERENCE = inspect.getsource(lab1)
ACK_THEN_COUNT = "            client.xack(stream, group, msg_id)\n            done += 1\n"


def _changed(old: str, new: str) -> str:
    assert REFERENCE.count(old) == 1, old
    return REFERENCE.replace(old, new)


BROKEN = {
    # the consumer acks before the work
    "ack_first": _changed(
        "            try:\n                handle(msg_id, fields, consumer)",
        "            client.xack(stream, group, msg_id)\n"
        "            try:\n                handle(msg_id, fields, consumer)",
    ),
    # the consumer never sends XACK (the rescuer takes everything back, and it is processed twice)
    "never_acks": _changed(ACK_THEN_COUNT, "            done += 1\n"),
    # the starter's docstring followed with '/': IDLE 500.0, which Redis refuses
    "float_idle": _changed("count=count, idle=min_idle_ms // 2\n", "count=count, idle=min_idle_ms / 2\n"),
    # every journal line names billing-1 as the owner
    "wrong_owner": _changed('owner, delivered = owners.get(msg_id, ("?", 0))',
                            'owner, delivered = "billing-1", owners.get(msg_id, ("?", 0))[1]'),
}


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name.split(" (")[0].split(" lab1check")[0].split(":")[0]: c for c in checks}


@pytest.fixture(scope="module")
def broken(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Check]]:
    folder = tmp_path_factory.mktemp("lab1-broken")
    for name, text in BROKEN.items():
        (folder / f"{name}.py").write_text(text)
    with ThreadPoolExecutor(len(BROKEN)) as pool:
        runs = {name: pool.submit(check_lab1.run_checks, str(folder / f"{name}.py"), redis_url) for name in BROKEN}
        return {name: _by_name(run.result()) for name, run in runs.items()}


@pytest.mark.slow
def test_reference_passes_every_check(redis_url: str) -> None:
    checks = check_lab1.run_checks("solutions.lab1", redis_url)
    assert len(checks) == 10
    assert [c for c in checks if not c.passed] == []


@pytest.mark.slow
def test_ack_before_processing_fails_with_the_reason(broken: dict[str, dict[str, Check]]) -> None:
    checks = broken["ack_first"]
    ack = checks["XACK only after the work"]
    assert not ack.passed
    assert "already acknowledged when the work ran" in ack.detail
    assert "XACK before processing turns every failure into a loss" in ack.detail
    lost = checks["nothing lost"]
    assert not lost.passed and "never processed: #5, #10" in lost.detail
    assert not checks["each failure paired with its reprocessing"].passed
    # XPENDING is empty all the same: an empty PEL alone does not prove nothing was lost.
    assert checks["XPENDING"].passed


@pytest.mark.slow
def test_a_consumer_that_never_acks_fails_and_nothing_passes_vacuously(broken: dict[str, dict[str, Check]]) -> None:
    checks = broken["never_acks"]
    ack = checks["XACK only after the work"]
    assert not ack.passed and ack.detail.startswith("not exercised: no consumer ever acknowledged")
    once = checks["each processed message acknowledged by its consumer"]
    assert not once.passed and "events processed twice: #" in once.detail and "never acknowledged" in once.detail


@pytest.mark.slow
def test_each_distinct_error_is_printed_once_with_its_command(broken: dict[str, dict[str, Check]]) -> None:
    errors = broken["float_idle"]["workers ran without errors"]
    assert not errors.passed
    assert "1 distinct: ResponseError: value is not an integer or out of range (from XPENDING " in errors.detail
    assert " IDLE 500.0 " in errors.detail and "[rescuer x" in errors.detail
    assert errors.detail.count("value is not an integer") == 1


@pytest.mark.slow
def test_a_failure_journaled_under_the_wrong_owner_is_named_so(broken: dict[str, dict[str, Check]]) -> None:
    paired = broken["wrong_owner"]["each failure paired with its reprocessing"]
    assert not paired.passed
    assert "failed in billing-2: reprocessed, but journaled as taken from billing-1" in paired.detail
    assert "no reprocessing" not in paired.detail


def test_untouched_starter_fails_every_check_that_matters(redis_url: str) -> None:
    checks = check_lab1.run_checks("labs.lab1.starter", redis_url)
    assert checks[0].name == "load the implementation" and checks[0].passed
    assert [c.name for c in checks[1:] if c.passed] == []  # nothing passes because nothing happened
    by = _by_name(checks)
    assert by["XPENDING"].detail.startswith("not exercised: no message was ever read")
    assert by["each processed message acknowledged by its consumer"].detail.startswith("not exercised")
    errors = by["workers ran without errors"].detail
    distinct = [part for part in errors.split("; ") if "NotImplementedError" in part]
    assert len(distinct) == len(set(distinct)) >= 3  # producer, consumers, rescuer: each error once


def test_cli_prints_fail_and_exits_1_for_the_starter(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = check_lab1.main(["--impl", "labs.lab1.starter", "--redis-url", redis_url])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out and "NotImplementedError" in out and "approximate MAXLEN" in out
    assert max(len(line) for line in out.splitlines()) > 80  # piped: not wrapped at 80 columns


def test_missing_functions_are_named(tmp_path: Path) -> None:
    partial = tmp_path / "partial.py"
    partial.write_text("def produce_one(*a, **k):\n    return '1-0'\n")
    with pytest.raises(ImplError, match="lacks ensure_group, consume_once, rescue_once"):
        load_impl(str(partial))
    with pytest.raises(ImplError, match="no such file"):
        load_impl(str(tmp_path / "absent.py"))
    with pytest.raises(ImplError, match="cannot import"):
        load_impl("no_such_module_for_lab1")
