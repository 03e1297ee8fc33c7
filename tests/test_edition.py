"""labs.exercises.edition: the student edition covers every notebook, blanks every solution, and stays in step.

"In step" is proved twice. On the files: the student edition is the reference with each
``### BEGIN SOLUTION`` region replaced by ``# ваш код`` and nothing else changed bar the
edition's own, listed changes (the banner, the ``raises-exception`` tags, ``student_mode()`` in
the first code cell, the guarded clean-up, the prose of ``edition.STUDENT_PROSE``), so putting
the regions back gives the reference. On a kernel, against real Redis: for each notebook with
exercises, the kernel runs the student edition's setup cell, then walks each exercise the way a
student does in JupyterLab, blank -> wrong -> right -> right again -> the preparing cell and right
(``kernel_support.student_path``: the wrong answers, and the task's numbers the green verdicts carry).
See ``notebooks/CONVENTIONS.md``. One kernel serves every
notebook (its namespace reset with ``%reset -f`` before each), so the notebooks' imports (plotly,
the panels) are paid once, not once per notebook.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from kernel_support import KernelCells, student_path

from labs.exercises import edition
from labs.exercises.notebook import exercises_of

pytestmark = pytest.mark.timeout(180)

NOTEBOOKS = sorted(edition.SOURCE_DIR.glob("*.ipynb"))
REGION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION.*?^[ \t]*### END SOLUTION[^\n]*", re.MULTILINE | re.DOTALL)
REDIS_ERRORS = {"ConnectionError", "TimeoutError", "ResponseError", "DataError", "ClusterDownError", "ClusterError"}
CLEANUP = """
_prefix = globals().get("P") or globals().get("PREFIX")
_keys = list(r.scan_iter(match=_prefix + "*", count=1000)) if _prefix else []
if _keys:
    r.delete(*_keys)
"""


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("student") / "notebooks"
    results = edition.write_edition(edition.SOURCE_DIR, out)
    assert [r.outcome for r in results] == ["written"] * len(NOTEBOOKS)
    return out


def read(path: Path) -> Any:
    return nbformat.read(path, as_version=4)


def blanked(source: str) -> str:
    """What the student edition should make of a solution cell (independently of nbgrader)."""
    return REGION.sub(lambda m: m["indent"] + edition.CODE_STUB, source)


def exercise_cells(nb: Any) -> dict[str, list[Any]]:
    """Exercise id -> its code cells, in order (cell metadata ``exercise``)."""
    found: dict[str, list[Any]] = {}
    for cell in nb.cells:
        if exercise_id := cell.metadata.get("exercise"):
            found.setdefault(exercise_id, []).append(cell)
    return found


def test_every_notebook_gets_a_student_copy_with_every_region_blanked(student_dir: Path) -> None:
    assert sorted(p.name for p in student_dir.glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    regions = 0
    for reference_path in NOTEBOOKS:
        reference, student = read(reference_path), read(student_dir / reference_path.name)
        assert student.cells[0].id == edition.BANNER_ID and student.metadata["student_edition"] is True
        assert len(student.cells) == len(reference.cells) + 1, reference_path.name
        code = [c.id for c in reference.cells if c.cell_type == "code"]
        for ref, stu in zip(reference.cells, student.cells[1:], strict=True):
            assert "BEGIN SOLUTION" not in stu.source and "END SOLUTION" not in stu.source
            assert not stu.get("outputs") and stu.metadata["nbgrader"]["schema_version"] == 3  # labs/grading/release.py
            if edition.is_solution(ref):
                regions += ref.source.count("### BEGIN SOLUTION")
                assert edition.CODE_STUB in stu.source and stu.source == blanked(ref.source), ref.id
            else:
                assert stu.source == student_twin(ref, code), ref.id  # the reference, bar the edition's own changes
            tags = stu.metadata.get("tags", [])
            in_exercise = bool(edition.check_ids(ref.source) or ref.metadata.get("exercise"))
            exercise_cell = ref.cell_type == "code" and in_exercise
            assert (edition.RAISES in tags) == exercise_cell, ref.id
            assert "test_exercises_nb" not in stu.source, f"{ref.id}: the student edition points at the answers"
            assert not re.search(r"уже\s+стоит\s+эталон", stu.source), f"{ref.id}: no reference in a student's cell"
    assert regions >= 2  # the demo exercises of notebook 02 at least


def student_twin(ref: Any, code_ids: list[str]) -> str:
    """What the student edition makes of a cell that is not a solution (see ``edition.student_code_cells``)."""
    if ref.cell_type == "markdown":
        return edition.student_prose(ref.source)
    if ref.id == code_ids[0]:
        return edition.student_setup(ref.source)
    if ref.id == code_ids[-1]:
        return edition.guarded_cleanup(ref.source)
    return str(ref.source)


def test_the_student_edition_keeps_redis_up_and_catches_redis_errors(student_dir: Path) -> None:
    for path in NOTEBOOKS:
        code = [c for c in read(student_dir / path.name).cells if c.cell_type == "code"]
        assert code[0].source.rstrip().endswith("student_mode()"), path.name
        assert code[-1].source.startswith(edition.CLEANUP_GUARD) and "FINISHED = False" in code[-1].source
        compile(code[-1].source, path.name, "exec")  # the indented clean-up is still Python
    assert "reset(" in edition.BANNER and "make down" in edition.BANNER


def test_putting_the_solutions_back_gives_the_reference(student_dir: Path) -> None:
    for reference_path in NOTEBOOKS:
        reference, student = read(reference_path), read(student_dir / reference_path.name)
        by_id = {cell.id: cell for cell in reference.cells}
        code = [c.id for c in reference.cells if c.cell_type == "code"]
        restored = [
            by_id[c.id].source if edition.is_solution(by_id[c.id]) else c.source for c in student.cells[1:]
        ]
        assert restored == [c.source if edition.is_solution(c) else student_twin(c, code) for c in reference.cells]


def test_a_marker_outside_a_solution_cell_is_refused(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")]
    (tmp_path / "src").mkdir()
    nbformat.write(nb, tmp_path / "src" / "99_bad.ipynb")
    assert edition.main(["--source", str(tmp_path / "src"), "--out", str(tmp_path / "out")]) == 1


def test_a_students_changed_notebook_is_kept_unless_forced(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / NOTEBOOKS[0].name).write_bytes(NOTEBOOKS[0].read_bytes())
    out = tmp_path / "out"
    assert [r.outcome for r in edition.write_edition(src, out)] == ["written"]
    assert [r.outcome for r in edition.write_edition(src, out)] == ["unchanged"]
    mine = out / NOTEBOOKS[0].name
    mine.write_text(mine.read_text().replace("# ваш код", "# my work"))
    assert [r.outcome for r in edition.write_edition(src, out)] == ["kept"]
    assert "# my work" in mine.read_text()
    assert [r.outcome for r in edition.write_edition(src, out, force=["07"])] == ["kept"]  # FORCE=07: not this one
    assert [r.outcome for r in edition.write_edition(src, out, force=[NOTEBOOKS[0].name[:2]])] == ["replaced"]
    (first,) = out.glob("*.bak")
    assert "# my work" in first.read_text()
    mine.write_text(mine.read_text().replace("# ваш код", "# my second try"))
    assert edition.main(["--source", str(src), "--out", str(out), "--force"]) == 0  # FORCE=1: all
    baks = sorted(out.glob("*.bak"))
    assert len(baks) == 2 and "# my work" in first.read_text()  # the earlier .bak is not overwritten
    assert any("# my second try" in b.read_text() for b in baks)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_has_its_cells_and_each_check_its_exercise(path: Path) -> None:
    nb = read(path)
    number = path.name[:2]
    registered = {e.id for e in exercises_of(number)}
    cells = exercise_cells(nb)
    checked = {i for cell in nb.cells if cell.cell_type == "code" for i in edition.check_ids(cell.source)}
    assert set(cells) == registered == checked, f"{path.name}: cells {set(cells)}, nb{number} {registered}, {checked}"
    for exercise_id, group in cells.items():
        indexes = [nb.cells.index(cell) for cell in group]
        code_between = [c for c in nb.cells[indexes[0] : indexes[-1] + 1] if c.cell_type == "code"]
        assert code_between == group, f"{exercise_id}: its code cells are not contiguous"
        assert group[-1].source.strip() == f'check("{exercise_id}")', f"{exercise_id}: the last cell is the check"
        solutions = [cell for cell in group if edition.is_solution(cell)]
        assert solutions, f"{exercise_id}: no solution cell"
        for cell in solutions:
            assert cell.metadata["nbgrader"]["grade_id"].split("-")[0] == exercise_id
            assert cell.source.count("### BEGIN SOLUTION") == cell.source.count("### END SOLUTION") >= 1


@pytest.fixture(scope="module")
def kernel() -> Iterator[KernelManager]:
    """One kernel for every notebook's exercises (started in the notebooks' folder, as JupyterLab would)."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(edition.SOURCE_DIR))
    yield km
    km.shutdown_kernel(now=True)


def _with_exercises() -> Iterator[Path]:
    for path in NOTEBOOKS:
        if exercises_of(path.name[:2]):
            yield path


def _kind(cell: Any) -> str:
    if edition.check_ids(cell.source):
        return "check"
    return "blank" if edition.CODE_STUB in cell.source else "prepare"


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_with_exercises()), ids=lambda p: p.stem)
def test_every_exercise_goes_blank_wrong_right_again_and_prepared_in_one_kernel(
    path: Path, student_dir: Path, redis_url: str, kernel: KernelManager
) -> None:
    """The student edition's setup cell (``student_mode()``), then each exercise the way a student goes through
    it in JupyterLab (cells sent with their cell ids), in one kernel: blank -> wrong -> right -> right again ->
    the preparing cell and right (see ``exercise_support.student_path``): the check is red, red, then green
    three times, with the task's numbers in its words."""
    student = read(student_dir / path.name)
    reference = read(path)
    session = KernelCells(kernel)
    try:
        session.run("%reset -f")
        setup = next(c for c in student.cells if c.cell_type == "code")
        out = session.run(setup.source, setup.id)
        assert not out.errors, out.errors
        ref_groups, stu_groups = exercise_cells(reference), exercise_cells(student)
        for exercise_id in ref_groups:
            student_path(session, exercise_id, ref_groups[exercise_id], stu_groups[exercise_id])
    finally:
        session.run(CLEANUP)
        session.close()
