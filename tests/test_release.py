"""The student release keeps nbgrader's metadata in step with the reference notebooks (no kernel needed).

For every notebook: each reference solution cell is an editable ``answer-NN_K`` cell, each
``check("NN.K")`` cell an autograded, locked ``check-NN_K`` cell with points, everything else
locked read-only; grade ids are unique and nbgrader's own validator accepts every cell.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

from labs import notebook_release as release
from labs.exercises import edition

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def releases() -> dict[str, tuple[object, object]]:
    exporter = edition._exporter()
    return {
        path.stem: (nbformat.read(str(path), as_version=4),
                    nbformat.reads(edition.student_text(path, exporter), as_version=4))
        for path in NOTEBOOKS
    }


def test_every_notebook_has_answers_checks_and_locked_cells_in_step(releases: dict[str, tuple]) -> None:
    validator = MetadataValidator()
    for name, (reference, student) in releases.items():
        ref_solutions = {c.id for c in reference.cells if c.metadata.get("nbgrader", {}).get("solution")}
        ref_checks = {release.check_ids(c.source)[0] for c in reference.cells
                      if c.cell_type == "code" and release.check_ids(c.source)}
        assert ref_solutions and ref_checks, name
        seen = []
        for cell in student.cells:
            meta = cell.metadata["nbgrader"]
            validator.validate_cell(cell)  # nbgrader's schema 3: raises on anything it would refuse
            seen.append(meta["grade_id"])
            if cell.id in ref_solutions:
                assert meta["solution"] and not meta["locked"] and meta["grade_id"].startswith("answer-"), cell.id
                assert cell.metadata.get("editable", True) is not False
            elif meta["grade"]:
                assert meta["locked"] and meta["points"] == release.POINTS_PER_CHECK
                assert release.exercise_of(meta["grade_id"]) in ref_checks
            else:
                assert meta["locked"] and cell.metadata["editable"] is False and cell.metadata["deletable"] is False
        assert len(seen) == len(set(seen)), f"{name}: grade ids repeat"
        checks = {release.exercise_of(g) for g in seen if g.startswith(release.CHECK_PREFIX)}
        assert checks == ref_checks, name
        answers = sum(g.startswith(release.ANSWER_PREFIX) for g in seen)
        assert answers == len(ref_solutions), name


def test_grade_ids_round_trip_to_exercise_ids() -> None:
    assert release.safe_id("02.1-b") == "02_1-b"
    assert release.exercise_of("check-02_4") == "02.4"
    assert release.exercise_of("answer-02_1-b") == "02.1"
    assert release.exercise_of("cell-intro") is None
