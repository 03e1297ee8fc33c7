"""labs.grading.integrity on a released notebook: what it finds, what it repairs (no kernel)."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

from labs import notebook_release as release
from labs.exercises import edition
from labs.grading import demo, integrity

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_consumer_groups.ipynb"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def released() -> object:
    return nbformat.reads(edition.student_text(NOTEBOOK), as_version=4)


def _write(tmp_path: Path, nb: object) -> Path:
    path = tmp_path / NOTEBOOK.name
    nbformat.write(nb, str(path))
    return path


def test_an_untouched_notebook_has_no_problem(released: object, tmp_path: Path) -> None:
    found = integrity.inspect(_write(tmp_path, copy.deepcopy(released)), released)
    assert found.readable and found.problems == []


def test_a_deleted_check_is_put_back_and_costs_its_exercise(released: object, tmp_path: Path) -> None:
    nb = demo.delete_check(copy.deepcopy(released), "02.3")
    found = integrity.inspect(_write(tmp_path, nb), released)
    assert [(p.exercise, p.reason.split(" (")[0]) for p in found.problems] == [("02.3", "удалена ячейка проверки")]
    assert [c.source for c in found.notebook.cells] == [c.source for c in released.cells]  # back at its place


def test_an_edited_locked_cell_costs_its_exercise_and_one_outside_exercises_costs_nothing(
    released: object, tmp_path: Path
) -> None:
    nb = demo.edit_check(copy.deepcopy(released), "02.1")
    setup = next(c for c in nb.cells if c.cell_type == "code")
    setup.source += "\nREDIS_URL = 'redis://elsewhere'"
    found = integrity.inspect(_write(tmp_path, nb), released)
    by_exercise = {p.exercise: p.reason for p in found.problems}
    assert by_exercise["02.1"].startswith("изменена ячейка проверки (check-02_1")
    assert "баллы не сняты" in by_exercise[None]


@pytest.mark.parametrize("text", ["{not json", '{"cells": 3}', "[]"])
def test_a_file_that_is_not_a_notebook_is_one_whole_notebook_problem(
    released: object, tmp_path: Path, text: str
) -> None:
    path = tmp_path / NOTEBOOK.name
    path.write_text(text, encoding="utf-8")
    found = integrity.inspect(path, released)
    assert not found.readable and found.problems[0].whole_notebook and "ноутбук не оценён" in found.problems[0].reason


def _solved(released: object) -> object:
    reference = nbformat.read(str(NOTEBOOK), as_version=4)
    return demo.solved(released, reference)


def _answers(nb: object) -> dict[str, str]:
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("answer-")}


def test_the_reference_notebook_is_matched_and_its_answer_key_earns_nothing(released: object, tmp_path: Path) -> None:
    reference = nbformat.read(str(NOTEBOOK), as_version=4)
    found = integrity.inspect(_write(tmp_path, reference), released)
    notes = [p.reason for p in found.problems if p.exercise is None]
    assert any("не студенческая версия (это эталонный ноутбук из notebooks/)" in n for n in notes), notes
    assert any("make student" in n for n in notes)
    keyed = {p.exercise for p in found.problems if "эталонное решение" in p.reason}
    checks = {release.exercise_of(g) for g in release.grade_ids(released) if g.startswith(release.CHECK_PREFIX)}
    assert keyed == checks  # every exercise: its answer is the key, not the student's
    assert [release.grade_ids(found.notebook)] == [release.grade_ids(released)]  # the release's cells, in order


def test_a_notebook_whose_editor_dropped_the_metadata_and_ids_is_matched_by_text_and_place(
    released: object, tmp_path: Path
) -> None:
    solved = _solved(copy.deepcopy(released))
    expected = _answers(solved)
    for index, cell in enumerate(solved.cells):
        cell.metadata = {}
        cell["id"] = f"other-editor-{index}"
    found = integrity.inspect(_write(tmp_path, solved), released)
    assert [p for p in found.problems if p.exercise] == [], found.problems
    (note,) = [p.reason for p in found.problems]
    assert "нет метаданных nbgrader" in note and "сдайте student/notebooks/02_consumer_groups.ipynb" in note
    assert _answers(found.notebook) == expected


def test_moved_cells_go_back_to_the_release_order(released: object, tmp_path: Path) -> None:
    solved = _solved(copy.deepcopy(released))
    expected = _answers(solved)
    answer = next(i for i, c in enumerate(solved.cells) if c.metadata["nbgrader"]["grade_id"].startswith("answer-"))
    solved.cells.insert(1, solved.cells.pop(answer))  # an answer moved up to the top
    found = integrity.inspect(_write(tmp_path, solved), released)
    assert list(release.grade_ids(found.notebook)) == list(release.grade_ids(released))
    assert _answers(found.notebook) == expected and not [p for p in found.problems if p.exercise]
    assert "ячейки переставлены" in found.problems[0].reason


def test_a_copied_check_cannot_count_twice(released: object, tmp_path: Path) -> None:
    solved = _solved(copy.deepcopy(released))
    check = next(c for c in solved.cells if c.metadata["nbgrader"]["grade_id"].startswith("check-"))
    extra = copy.deepcopy(check)
    extra["id"] = "my-copy"
    solved.cells.append(extra)
    found = integrity.inspect(_write(tmp_path, solved), released)
    grade_ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in found.notebook.cells]
    assert grade_ids.count(check.metadata["nbgrader"]["grade_id"]) == 1
    assert found.notebook.cells[-1].source == check.source and "nbgrader" not in found.notebook.cells[-1].metadata


def test_another_notebook_in_its_place_is_one_clear_line(released: object, tmp_path: Path) -> None:
    other = nbformat.read(str(NOTEBOOK.parent / "05_read_loop_and_idempotency.ipynb"), as_version=4)
    found = integrity.inspect(_write(tmp_path, other), released)
    (problem,) = found.problems
    assert problem.whole_notebook and "не похож на студенческую версию" in problem.reason
    assert "make student" in problem.reason
