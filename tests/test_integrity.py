"""labs.grading.integrity on a released notebook: what it finds, what it repairs (no kernel)."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

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
