"""labs.lab3.partition: the partition mode's rows and checks (from recorded figures), and its one-line refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.experiments.worker_partition import WorkerPartition
from labs.lab3 import partition
from labs.launcher import netns
from labs.report import make_console

pytestmark = pytest.mark.timeout(30)


def _run(dedupe: str, duplicated: int, uncharged: int = 0) -> WorkerPartition:
    return WorkerPartition(
        dedupe=dedupe, confirmed=400, confirmed_gone=150, survived=250, survived_uncharged=uncharged, charged=250,
        duplicated=duplicated, charged_gone=40, promoted_s=2.1, healed_s=5.0, demoted_s=17.0, drained_s=17.2,
        downtime_s=9.5, restarts=0, exit_codes=(0, 0), log_lines={"a": 10, "b": 12}, warning_lines={"a": 1, "b": 1},
    )


def test_the_worker_rows_and_checks() -> None:
    runs = [_run("sqlite", 0), _run("none", 12)]
    table = partition._worker_table(runs)
    assert len(table.rows) == 2 and table.columns == partition.WORKER_COLUMNS
    assert all(check.passed for check in partition._worker_checks(runs))


def test_a_situation_that_did_not_arise_is_not_a_pass() -> None:
    checks = {c.name: c for c in partition._worker_checks([_run("sqlite", 1, uncharged=2), _run("none", 0)])}
    assert not checks["sqlite: no event charged twice"].passed
    assert not checks["sqlite: every event that survived in Redis was charged"].passed
    none = checks["none: the duplicates are there to count"]
    assert not none.passed and "did not arise" in none.detail


def test_without_partitions_the_mode_refuses_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(netns, "unavailable_reason", lambda: "network namespaces and nftables need root")
    code = partition.run_partition(make_console(), topology="sentinel", quick=True, worker=None, reports_dir=tmp_path)
    assert code == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "need root" in out[0]
