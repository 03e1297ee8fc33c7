"""labs.grading.submissions: the folder layouts instructors get, zips included (no kernel, no Redis)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from labs.grading.submissions import find_submissions

NAME = "05_read_loop_and_idempotency"
pytestmark = pytest.mark.timeout(30)


def _touch(path: Path, text: str = "{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_nbgrader_exchange_plain_and_zip_layouts_are_all_found(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _touch(folder / "ann" / "workbook" / f"{NAME}.ipynb")
    _touch(folder / "bob+workbook+2026-12-02 10:00:00.000000 UTC" / "workbook" / f"{NAME}.ipynb")
    _touch(folder / "cem" / "deep" / "er" / f"{NAME}.ipynb")
    _touch(folder / "cem" / ".ipynb_checkpoints" / f"{NAME}.ipynb")
    _touch(folder / "cem" / "my_lab1.py", "")
    with zipfile.ZipFile(folder / "dan.zip", "w") as zipped:
        zipped.writestr(f"dan/{NAME}.ipynb", "{}")
        zipped.writestr("dan/lab3_worker.py", "")
    found = {s.student: s for s in find_submissions(folder, [NAME], tmp_path / "unpacked")}
    assert sorted(found) == ["ann", "bob", "cem", "dan"]
    assert all(NAME in s.notebooks for s in found.values())
    assert ".ipynb_checkpoints" not in str(found["cem"].notebooks[NAME])
    assert found["cem"].lab1 is not None and found["cem"].lab1.name == "my_lab1.py"
    assert found["dan"].lab3 is not None and found["ann"].lab1 is None


def test_a_zip_that_would_write_outside_its_folder_or_is_no_zip_costs_only_its_student(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    with zipfile.ZipFile(folder / "eve.zip", "w") as zipped:
        zipped.writestr("../../escaped.ipynb", "{}")
    (folder / "fay.zip").write_text("not a zip", encoding="utf-8")
    _touch(folder / "gus" / f"{NAME}.ipynb")
    found = {s.student: s for s in find_submissions(folder, [NAME], tmp_path / "unpacked")}
    assert not (tmp_path / "escaped.ipynb").exists()
    assert "outside" in (found["eve"].problem or "") and found["eve"].notebooks == {}
    assert "не принят" in (found["fay"].problem or "")
    assert found["gus"].problem is None and NAME in found["gus"].notebooks
