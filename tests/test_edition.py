"""labs.exercises.edition: the student edition covers every notebook, blanks every solution, and stays in step.

"In step" is proved twice. On the files: the student edition is the reference with each
``### BEGIN SOLUTION`` region replaced by ``# ваш код`` and nothing else changed bar the
edition's own, listed changes (the banner, the ``raises-exception`` tags, ``student_mode()`` in
the first code cell, the guarded clean-up, the prose of ``edition.STUDENT_PROSE``), so putting
the regions back gives the reference. On a kernel, against real Redis: for each notebook with
exercises, the kernel runs the student edition's setup cell, then walks each exercise the way a
student does, blank -> wrong -> right -> the same again -> ``reset`` -> right (``_attempts``).
See ``notebooks/CONVENTIONS.md``. One kernel serves every
notebook (its namespace reset with ``%reset -f`` before each), so the notebooks' imports (plotly,
the panels) are paid once, not once per notebook.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from labs.exercises import edition
from labs.exercises.notebook import exercises_of, find

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


def _kind(cell: Any) -> str:
    if edition.check_ids(cell.source):
        return "check"
    return "blank" if edition.CODE_STUB in cell.source else "prepare"


def _defined(source: str) -> set[str]:
    """The names a cell binds at top level (assignments, defs, imports)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _builds_state(source: str) -> bool:
    """A preparing cell that does more than import (writes to Redis, removes files)."""
    return any(not isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.parse(source).body)


def _attempts(exercise_id: str, ref: list[Any], stu: list[Any]) -> list[tuple[str, str, str]]:
    """A student's path through one exercise, as (step, exercise, source) cells, all in one kernel.

    ``blank``: the preparing cell, the blank, the check (fails: the names are missing); ``wrong``:
    each name the check reads set to ``None`` (fails, and says how to start again); ``right``: the
    reference solution (passes). Where the preparing cell builds state (an import-only one leaves
    that to the solution, which starts from scratch itself): ``again``, the same solution a second
    time, on the state the first one used up (passes, or the check names the way back), and
    ``reset``: ``reset("NN.K")``, then the solution (passes).
    """
    kinds = {_kind(cell): cell.source for cell in stu}
    solution = next(c.source for c in ref if edition.is_solution(c))
    check = kinds["check"]
    prepared = _defined(kinds.get("prepare", ""))
    wrong = [name for name in find(exercise_id).needs if name not in prepared]  # what the student's cell defines
    steps = [("blank", kinds[k]) for k in ("prepare", "blank", "check") if k in kinds]
    if wrong:
        steps += [("wrong", "\n".join(f"{name} = None" for name in wrong)), ("wrong", check)]
    steps += [("right", solution), ("right", check)]
    if _builds_state(kinds.get("prepare", "")):  # an import-only preparing cell: the solution builds its own state
        steps += [("again", solution), ("again", check)]
        steps += [("reset", f'reset("{exercise_id}")'), ("reset", solution), ("reset", check)]
    return [(step, exercise_id, source) for step, source in steps]


def _judge(step: str, exercise_id: str, source: str, out: Any) -> None:
    errors, html = _outputs(out)
    where = f"{exercise_id} {step}: {source[:60]!r}"
    if not edition.check_ids(source):
        if step == "again":  # the solution on a used-up state may fail: a Redis error in one line, then the check
            redis_errors = [e for e in errors if e.ename in REDIS_ERRORS]  # guides; a Python error is the code's own
            assert all(len(e.traceback) == 1 for e in redis_errors), f"{where} raised {errors}"
        else:
            assert not errors, f"{where} raised {errors}"
        return
    if step in ("blank", "wrong"):
        assert [e.ename for e in errors] == ["CheckFailed"], f"{where}: passed"
        (line,) = errors[0].traceback  # one line, not a traceback wall
        assert f"Проверка {exercise_id} не пройдена" in line and "File " not in line
        assert re.search("[а-яА-Я]{4}", errors[0].evalue)
        assert any("data-passed='false'" in h and "Подсказка" in h for h in html)
        if step == "wrong":
            assert "пока не определен" not in errors[0].evalue, errors[0].evalue
            assert any("exercise-retry" in h for h in html), f"{where}: no way back to a fresh start"
    elif step == "again" and errors:
        assert "exercise-retry" in " ".join(html) and "Новая попытка" in errors[0].evalue, f"{where}: {errors}"
    else:
        assert not errors, f"{where}: the reference solution fails its check: {errors}"
        assert any("data-passed='true'" in h for h in html)


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_with_exercises()), ids=lambda p: p.stem)
def test_every_exercise_goes_blank_wrong_right_and_again_in_one_kernel(
    path: Path, student_dir: Path, redis_url: str, kernel: KernelManager
) -> None:
    """The student edition's setup cell (``student_mode()``), then each exercise's path (see ``_attempts``)."""
    reference, student = read(path), read(student_dir / path.name)
    setup = next(c for c in student.cells if c.cell_type == "code")
    ref_groups, stu_groups = exercise_cells(reference), exercise_cells(student)
    plan = [cell for exercise_id in ref_groups for cell in _attempts(exercise_id, ref_groups[exercise_id],
                                                                     stu_groups[exercise_id])]
    ran = _run([setup] + [nbformat.v4.new_code_cell(source) for _, _, source in plan], kernel)
    setup_errors, _ = _outputs(ran.cells[0])
    assert not setup_errors, setup_errors
    for (step, exercise_id, source), out in zip(plan, ran.cells[1:], strict=False):
        _judge(step, exercise_id, source, out)
