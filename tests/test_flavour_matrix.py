"""labs.flavour_matrix: what each subset runs, the JUnit counts, the summary; the run itself is make test-matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs import flavour_matrix
from labs.flavour_matrix import FlavourResult, paths_for, read_junit, to_markdown

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_a" name="test_ok"/>
<testcase classname="tests.test_a" name="test_bad"><failure message="boom"/></testcase>
<testcase classname="tests.test_b" name="test_skip"><skipped message="no 8.2"/></testcase>
<testcase classname="tests.test_b" name="test_err"><error message="fixture"/></testcase>
</testsuite></testsuites>
"""


def test_junit_counts_each_outcome_once(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text(JUNIT)
    result = FlavourResult("redis8")
    read_junit(xml, result)
    assert (result.passed, result.failed, result.errors, result.skipped) == (1, 1, 1, 1)
    assert result.failures == ["tests.test_a::test_bad", "tests.test_b::test_err"] and not result.ok


def test_subsets_name_existing_files_and_every_notebook() -> None:
    root = flavour_matrix.ROOT
    notebooks = sorted(str(p.relative_to(root)) for p in (root / "notebooks").glob("*.ipynb"))
    assert paths_for("all") == ["tests", *notebooks]
    assert set(notebooks) <= set(paths_for("redis"))
    assert all((root / p).exists() for p in paths_for("redis"))
    assert "tests/test_cluster_faults.py" in paths_for("faults") and not set(notebooks) & set(paths_for("faults"))
    with pytest.raises(ValueError, match="all, redis, faults"):
        paths_for("some")


def test_summary_names_what_did_not_run_and_what_failed() -> None:
    ran = FlavourResult("redis8", "Redis 8.2.3", passed=3, failed=1, failures=["tests.t::x"], elapsed_s=90)
    missing = FlavourResult("valkey8", problem="valkey-server not found on PATH")
    text = to_markdown([ran, missing], "faults")
    assert "| redis8 | Redis 8.2.3 | 3 | 1 | 0 | 0 | 1.5 min |" in text
    assert "not run: valkey-server not found" in text and "- `tests.t::x`" in text


def test_unknown_flavour_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        flavour_matrix.main(["--flavours", "redis6"])
    assert "unknown flavour(s) redis6" in capsys.readouterr().err
