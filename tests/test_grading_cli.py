"""labs.grading.cli's demo: the class it makes, and the one line that says how to grade it."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.grading import cli

pytestmark = pytest.mark.timeout(120)


def test_the_demo_says_to_grade_its_small_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Graded whole (no SMALL=1), the demo's notebooks are not the student edition and score nothing: a
    # fresh-clone check of issue 38 met that, so the demo prints the command that grades them.
    folder = tmp_path / "class"
    assert cli.main(["demo", str(folder), "--kinds", "solved,untouched"]) == 0
    out = capsys.readouterr().out
    assert f"make grade SUBMISSIONS={folder} GRADE_NOTEBOOKS=05 SMALL=1" in out, out
    assert sorted(p.name for p in folder.iterdir()) == ["s00-solved", "s01-untouched"], out
