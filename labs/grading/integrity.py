"""What a submitted notebook did to the cells it must not touch, before nbgrader sees it.

nbgrader's own answers: an edited locked cell is silently restored from the gradebook
(``OverwriteCells``), a deleted test cell is either skipped or added back commented out, and a
file that is not JSON fails the whole run. Here each of those is found first and becomes a
:class:`Problem` with a Russian reason:

- **not a notebook** (invalid JSON, not nbformat 4): the notebook gets zero, the rest of the
  submission is graded;
- **a locked cell deleted**: put back from the release at its place, so the notebook still
  runs as designed, and the exercise it belongs to (cell metadata ``exercise``) gets zero;
- **a locked cell edited**: nbgrader restores it; its exercise gets zero;
- a locked cell outside any exercise (the setup, the prose) deleted or edited: restored, noted,
  no points lost (no exercise depended on the change).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from labs.grading import release


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a submission: the exercise it costs (``None``: none or the whole notebook)."""

    reason: str
    exercise: str | None = None
    whole_notebook: bool = False


@dataclass
class Inspection:
    """A submitted notebook after the checks: repaired (or ``None`` when unreadable) and its problems."""

    notebook: NotebookNode | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return self.notebook is not None


def _exercise_of(cell: NotebookNode) -> str | None:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
    return cell.get("metadata", {}).get("exercise") or release.exercise_of(grade_id)


def _normalized(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def read_submitted(path: Path) -> tuple[NotebookNode | None, str | None]:
    """The notebook at ``path``, or ``None`` and why it cannot be graded."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"файл {path.name} — не JSON ({exc}): ноутбук не оценён"
    if not isinstance(raw, dict) or raw.get("nbformat") != 4 or not isinstance(raw.get("cells"), list):
        return None, f"файл {path.name} — не ноутбук Jupyter (nbformat 4): ноутбук не оценён"
    try:
        return nbformat.reads(json.dumps(raw), as_version=4), None  # type: ignore[no-untyped-call]
    except Exception as exc:  # nbformat's own errors vary by version: any is "not a notebook"
        return None, f"файл {path.name} не читается как ноутбук ({type(exc).__name__}: {exc})"


def inspect(path: Path, released: NotebookNode) -> Inspection:
    """Compare the submitted notebook at ``path`` with the ``released`` one; repair what can be repaired."""
    notebook, unreadable = read_submitted(path)
    if notebook is None:
        return Inspection(None, [Problem(unreadable or "не читается", whole_notebook=True)])
    problems: list[Problem] = []
    submitted = {_grade_id(cell): cell for cell in notebook.cells if _grade_id(cell)}
    for cell in released.cells:
        grade_id = _grade_id(cell)
        if not grade_id or not _is_locked(cell):
            continue
        exercise = _exercise_of(cell)
        theirs = submitted.get(grade_id)
        if theirs is None:
            problems.append(Problem(_reason("удалена", cell, exercise), exercise))
        elif _normalized(theirs.source) != _normalized(cell.source) or theirs.cell_type != cell.cell_type:
            problems.append(Problem(_reason("изменена", cell, exercise), exercise))
    notebook.cells = _restored(notebook.cells, released.cells, set(submitted))
    return Inspection(notebook, problems)


def _grade_id(cell: NotebookNode) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))


def _is_locked(cell: NotebookNode) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("locked") or meta.get("grade")) and not meta.get("solution")


def _reason(what: str, cell: NotebookNode, exercise: str | None) -> str:
    kind = "проверки" if _grade_id(cell).startswith(release.CHECK_PREFIX) else "только для чтения"
    where = f"задания {exercise}" if exercise else "вне заданий"
    cost = "задание не засчитано" if exercise else "ячейка восстановлена, баллы не сняты"
    return f"{what} ячейка {kind} ({_grade_id(cell)}, {where}): {cost}"


def _restored(cells: list[NotebookNode], released: list[NotebookNode], present: set[str]) -> list[NotebookNode]:
    """``cells`` with every locked released cell that is missing put back after its released predecessor."""
    out = list(cells)
    for index, cell in enumerate(released):
        grade_id = _grade_id(cell)
        if not grade_id or grade_id in present or not _is_locked(cell):
            continue
        restored = nbformat.from_dict(json.loads(json.dumps(cell)))  # type: ignore[no-untyped-call]
        before = {_grade_id(c) for c in released[:index]}
        position = max((i + 1 for i, c in enumerate(out) if _grade_id(c) in before), default=0)
        out.insert(position, restored)
        present.add(grade_id)
    return out


def write(inspection: Inspection, target: Path) -> None:
    """Write the repaired notebook where nbgrader will read it."""
    if inspection.notebook is None:
        raise ValueError("an unreadable notebook cannot be written")
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(inspection.notebook, str(target))  # type: ignore[no-untyped-call]
