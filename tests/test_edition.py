"""labs.exercises.edition: the student edition covers every notebook, blanks every solution, and stays in step.

"In step" is proved twice. On the files: the student edition is the reference with each
``### BEGIN SOLUTION`` region replaced by ``# ваш код`` and nothing else changed (bar the
banner cell and the check cells' ``raises-exception`` tag), so putting the regions back gives
the reference. On a kernel, against real Redis: for each notebook with exercises, the kernel
runs the setup cell, then each exercise's **student** cells (the blank and the check: the check
must fail with one Russian line, not a traceback) and then its **reference** cells (the
solution and the check: it must pass). See ``notebooks/CONVENTIONS.md``. One kernel serves every
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
from nbclient import NotebookClient

from labs.exercises import edition
from labs.exercises.notebook import exercises_of

pytestmark = pytest.mark.timeout(180)

NOTEBOOKS = sorted(edition.SOURCE_DIR.glob("*.ipynb"))
REGION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION.*?^[ \t]*### END SOLUTION[^\n]*", re.MULTILINE | re.DOTALL)
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
        for ref, stu in zip(reference.cells, student.cells[1:], strict=True):
            assert "BEGIN SOLUTION" not in stu.source and "END SOLUTION" not in stu.source
            assert not stu.get("outputs") and stu.metadata["nbgrader"]["schema_version"] == 3  # labs/grading/release.py
            if edition.is_solution(ref):
                regions += ref.source.count("### BEGIN SOLUTION")
                assert edition.CODE_STUB in stu.source and stu.source == blanked(ref.source), ref.id
            else:
                assert stu.source == ref.source, ref.id  # everything else is the reference, untouched
            tags = stu.metadata.get("tags", [])
            assert (edition.RAISES in tags) == bool(ref.cell_type == "code" and edition.check_ids(ref.source))
    assert regions >= 2  # the demo exercises of notebook 02 at least


def test_putting_the_solutions_back_gives_the_reference(student_dir: Path) -> None:
    for reference_path in NOTEBOOKS:
        reference, student = read(reference_path), read(student_dir / reference_path.name)
        by_id = {cell.id: cell for cell in reference.cells}
        restored = [by_id[c.id].source if edition.is_solution(by_id[c.id]) else c.source for c in student.cells[1:]]
        assert restored == [c.source for c in reference.cells]


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
    assert [r.outcome for r in edition.write_edition(src, out, force=True)] == ["replaced"]
    assert "# my work" in mine.with_suffix(".ipynb.bak").read_text()


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


def _outputs(cell: Any) -> tuple[list[Any], list[str]]:
    errors = [o for o in cell.outputs if o.output_type == "error"]
    html = [o.data["text/html"] for o in cell.outputs if o.output_type == "display_data" and "text/html" in o.data]
    return errors, html


@pytest.fixture(scope="module")
def kernel() -> Iterator[KernelManager]:
    """One kernel for every notebook's exercises (started in the notebooks' folder, as JupyterLab would)."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(edition.SOURCE_DIR))
    yield km
    km.shutdown_kernel(now=True)


def _run(cells: list[Any], km: KernelManager) -> Any:
    """The cells after ``%reset -f`` (a fresh namespace; imported modules stay), then the clean-up."""
    nb = nbformat.v4.new_notebook(metadata=read(NOTEBOOKS[0]).metadata)
    nb.cells = [nbformat.v4.new_code_cell("%reset -f")]
    nb.cells += [nbformat.v4.new_code_cell(c.source) for c in cells] + [nbformat.v4.new_code_cell(CLEANUP)]
    client = NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True, km=km)
    client.execute()
    if client.kc is not None:
        client.kc.stop_channels()
    nb.cells = nb.cells[1:]
    return nb


def _with_exercises() -> Iterator[Path]:
    for path in NOTEBOOKS:
        if exercises_of(path.name[:2]):
            yield path


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_with_exercises()), ids=lambda p: p.stem)
def test_blanks_fail_their_checks_in_russian_and_the_solutions_pass(
    path: Path, student_dir: Path, redis_url: str, kernel: KernelManager
) -> None:
    reference, student = read(path), read(student_dir / path.name)
    setup = next(c for c in reference.cells if c.cell_type == "code")
    ref_groups, stu_groups = exercise_cells(reference), exercise_cells(student)
    plan: list[tuple[str, str, Any]] = []  # (exercise, edition, cell)
    for exercise_id in ref_groups:
        plan += [(exercise_id, "student", c) for c in stu_groups[exercise_id]]
        plan += [(exercise_id, "reference", c) for c in ref_groups[exercise_id]]
    ran = _run([setup] + [cell for _, _, cell in plan], kernel)
    setup_errors, _ = _outputs(ran.cells[0])
    assert not setup_errors, setup_errors
    for (exercise_id, which, cell), out in zip(plan, ran.cells[1:], strict=False):
        errors, html = _outputs(out)
        if not edition.check_ids(cell.source):
            assert not errors, f"{exercise_id} {which}: {cell.source[:60]!r} raised {errors}"
            continue
        if which == "student":
            assert [e.ename for e in errors] == ["CheckFailed"], f"{exercise_id}: the blank passed its check"
            (line,) = errors[0].traceback  # one line, not a traceback wall
            assert f"Проверка {exercise_id} не пройдена" in line and "File " not in line
            assert re.search("[а-яА-Я]{4}", errors[0].evalue)
            assert any("data-passed='false'" in h and "Подсказка" in h for h in html)
        else:
            assert not errors, f"{exercise_id}: the reference solution fails its check: {errors}"
            assert any("data-passed='true'" in h for h in html)
