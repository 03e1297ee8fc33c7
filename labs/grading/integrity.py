"""What a submitted notebook did to the cells it must not touch, before nbgrader sees it.

nbgrader's own answers: an edited locked cell is silently restored from the gradebook
(``OverwriteCells``), a deleted test cell is either skipped or added back commented out, and a
file that is not JSON fails the whole run. Here each of those is found first and becomes a
:class:`Problem` with a Russian reason:

- **not a notebook** (invalid JSON, not nbformat 4): the notebook gets zero, the rest of the
  submission is graded;
- **not the student edition** (the reference notebook from ``notebooks/``, a notebook whose
  nbgrader metadata another editor dropped, cells moved around): each cell is matched to the
  release by what still identifies it (:func:`align`: its nbgrader grade id, the reference's
  solution id, its cell id, its ``check("NN.K")`` call, a locked cell's text, an answer by its
  place between matched cells), put back in the release's order with the release's metadata,
  and one line says what was wrong and what to submit. An answer that cannot be placed soundly
  costs its exercise; a notebook where most cells match nothing is one clear zero. An answer
  cell that still holds the reference's ``### BEGIN SOLUTION`` region is the answer key, not
  the student's work: its exercise gets zero;
- **a locked cell deleted**: put back from the release at its place, so the notebook still
  runs as designed, and the exercise it belongs to (cell metadata ``exercise``) gets zero;
- **a locked cell edited**: nbgrader restores it; its exercise gets zero;
- locked cells outside any exercise (the setup, the prose) deleted or edited: restored, one
  note, no points lost (no exercise depended on the change).

Cells the student added keep their place but lose any nbgrader metadata (a copied check cell
cannot count twice, a made-up graded cell not at all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from labs import nbtypes
from labs import notebook_release as release


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
        return nbtypes.reads(json.dumps(raw)), None
    except Exception as exc:  # nbformat's own errors vary by version: any is "not a notebook"
        return None, f"файл {path.name} не читается как ноутбук ({type(exc).__name__}: {exc})"


def inspect(path: Path, released: NotebookNode) -> Inspection:
    """Compare the submitted notebook at ``path`` with the ``released`` one; repair what can be repaired."""
    notebook, unreadable = read_submitted(path)
    if notebook is None:
        return Inspection(None, [Problem(unreadable or "не читается", whole_notebook=True)])
    notebook, problems = align(notebook, released, path.name)
    if any(problem.whole_notebook for problem in problems):
        return Inspection(notebook, problems)
    outside: list[str] = []
    submitted = {_grade_id(cell): cell for cell in notebook.cells if _grade_id(cell)}
    for cell in released.cells:
        grade_id = _grade_id(cell)
        if not grade_id or not _is_locked(cell):
            continue
        exercise = _exercise_of(cell)
        theirs = submitted.get(grade_id)
        changed = theirs is None or (_normalized(theirs.source) != _normalized(cell.source)
                                     or theirs.cell_type != cell.cell_type)
        if changed and exercise is None:
            outside.append(_grade_id(cell))
        elif changed:
            problems.append(Problem(_reason("удалена" if theirs is None else "изменена", cell, exercise), exercise))
    if outside:
        shown = ", ".join(outside[:3]) + (f" и ещё {len(outside) - 3}" if len(outside) > 3 else "")
        problems.append(Problem(f"ячейки только для чтения вне заданий удалены или изменены ({shown}): "
                                "восстановлены, баллы не сняты"))
    notebook.cells = _restored(notebook.cells, released.cells, set(submitted))
    return Inspection(notebook, problems)


SOLUTION_MARKER = "### BEGIN SOLUTION"
MIN_MATCHED = 0.5  # of the release's locked cells: fewer found, and the notebook is not this one


@dataclass
class _Match:
    """Release cell index -> submitted cell index, and how each pair was found."""

    pairs: dict[int, int] = field(default_factory=dict)
    how: dict[int, str] = field(default_factory=dict)

    def add(self, rel: int, sub: int, how: str) -> None:
        if rel not in self.pairs and sub not in self.pairs.values():
            self.pairs[rel] = sub
            self.how[rel] = how

    def taken(self, sub: int) -> bool:
        return sub in self.pairs.values()


def _reference_answer_id(cell: NotebookNode) -> str | None:
    """The release's answer grade id of a reference solution cell (nbgrader ``solution``, grade id ``05.1``)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("solution") and meta.get("grade_id") and not str(meta["grade_id"]).startswith(release.ANSWER_PREFIX):
        return release.ANSWER_PREFIX + release.safe_id(str(meta["grade_id"]))
    return None


def _match(cells: list[NotebookNode], released: list[NotebookNode]) -> _Match:
    found = _Match()
    by_grade_id = {_grade_id(cell): i for i, cell in enumerate(released) if _grade_id(cell)}
    by_cell_id = {cell.get("id"): i for i, cell in enumerate(released) if cell.get("id")}
    by_check = {release.check_ids(cell.source)[0]: i for i, cell in enumerate(released)
                if cell.cell_type == "code" and _grade_id(cell).startswith(release.CHECK_PREFIX)}
    by_source: dict[tuple[str, str], list[int]] = {}
    for i, cell in enumerate(released):
        if _is_locked(cell) and not _grade_id(cell).startswith(release.CHECK_PREFIX):
            by_source.setdefault((cell.cell_type, _normalized(cell.source)), []).append(i)
    for sub, cell in enumerate(cells):  # the release's own grade ids, then the reference's solution ids
        for key, how in ((_grade_id(cell), "grade_id"), (_reference_answer_id(cell), "reference")):
            if key and key in by_grade_id and released[by_grade_id[key]].cell_type == cell.cell_type:
                found.add(by_grade_id[key], sub, how)
                break
    for sub, cell in enumerate(cells):  # cell ids (the release keeps the reference's), check calls, locked text
        if found.taken(sub):
            continue
        checks = release.check_ids(cell.source) if cell.cell_type == "code" else []
        candidates = [(by_cell_id.get(cell.get("id")), "id")]
        candidates += [(by_check.get(checks[0]) if checks else None, "check")]
        candidates += [(i, "text") for i in by_source.get((cell.cell_type, _normalized(cell.source)), [])]
        for rel, how in candidates:
            if rel is not None and rel not in found.pairs and released[rel].cell_type == cell.cell_type:
                found.add(rel, sub, how)
                break
    _match_answers_by_place(cells, released, found)
    return found


def _match_answers_by_place(cells: list[NotebookNode], released: list[NotebookNode], found: _Match) -> None:
    """An answer cell with no id left: the unmatched code cells between its matched neighbours, if they fit."""
    answers = [i for i, cell in enumerate(released) if _is_answer(cell) and i not in found.pairs]
    for rel in answers:
        if rel in found.pairs:
            continue
        before = max((i for i in found.pairs if i < rel), default=None)
        after = min((i for i in found.pairs if i > rel), default=None)
        low = found.pairs[before] if before is not None else -1
        high = found.pairs[after] if after is not None else len(cells)
        slots = [i for i in range((before if before is not None else -1) + 1,
                                  after if after is not None else len(released))
                 if _is_answer(released[i]) and i not in found.pairs]
        loose = [i for i in range(low + 1, high) if not found.taken(i) and cells[i].cell_type == "code"]
        if low < high and loose and len(loose) == len(slots):
            for slot, sub in zip(slots, loose, strict=True):
                found.add(slot, sub, "place")


def _is_answer(cell: NotebookNode) -> bool:
    return _grade_id(cell).startswith(release.ANSWER_PREFIX)


def _copy(cell: NotebookNode) -> NotebookNode:
    return nbtypes.copy(cell)


def _with_release_metadata(cell: NotebookNode, released: NotebookNode) -> NotebookNode:
    out = _copy(cell)
    out.metadata = json.loads(json.dumps(released.metadata))
    if released.get("id"):
        out["id"] = released["id"]
    return out


def _without_grading(cell: NotebookNode) -> NotebookNode:
    out = _copy(cell)
    out.metadata.pop("nbgrader", None)
    out.metadata.pop("exercise", None)
    return out


def _is_student_edition(cells: list[NotebookNode], released: list[NotebookNode]) -> bool:
    """Most of the release's grade ids there, each once, in the release's order (a deleted or edited cell is the
    integrity check's business, not a sign of another notebook)."""
    mine = [_grade_id(cell) for cell in cells if _grade_id(cell)]
    theirs = [_grade_id(cell) for cell in released if _grade_id(cell)]
    known = set(theirs)
    order = [gid for gid in mine if gid in known]
    return (len(order) == len(set(order)) == len(mine) and len(order) >= MIN_MATCHED * len(theirs)
            and order == [gid for gid in theirs if gid in set(order)])


def align(notebook: NotebookNode, released: NotebookNode, file_name: str = "") -> tuple[NotebookNode, list[Problem]]:
    """A notebook that is not the student edition, matched to the release where that is sound (module docstring)."""
    cells, rel = list(notebook.cells), list(released.cells)
    problems: list[Problem] = []
    if _is_student_edition(cells, rel):
        aligned = cells
    else:
        found = _match(cells, rel)
        locked = [i for i, cell in enumerate(rel) if _is_locked(cell)]
        matched = sum(i in found.pairs for i in locked)
        submit = (f"сдайте student/notebooks/{file_name or 'NN_….ipynb'} (make student), вписав решения в ячейки "
                  "«# ваш код»")
        if locked and matched < MIN_MATCHED * len(locked):
            reason = (f"ноутбук {file_name} не похож на студенческую версию (узнано {matched} из {len(locked)} "
                      f"ячеек только для чтения): не оценён; {submit}")
            return notebook, [Problem(reason, whole_notebook=True)]
        aligned = _rebuild(cells, rel, found)
        what = _what_is_wrong(cells, rel, found)
        problems.append(Problem(f"ноутбук {file_name} — не студенческая версия ({what}): ячейки сопоставлены с "
                                f"заданиями по id, тексту и вызовам check(...); в следующий раз {submit}"))
        for i in (i for i, cell in enumerate(rel) if _is_answer(cell) and i not in found.pairs):
            exercise = _exercise_of(rel[i])
            problems.append(Problem(f"не найдена ячейка ответа к заданию {exercise} ({_grade_id(rel[i])}): "
                                    f"задание не засчитано; {submit}", exercise))
    for cell in aligned:
        if _is_answer(cell) and SOLUTION_MARKER in cell.source:
            exercise = _exercise_of(cell)
            problems.append(Problem(f"в ячейке ответа к заданию {exercise} — эталонное решение из notebooks/ (метки "
                                    f"{SOLUTION_MARKER}), а не ваше: задание не засчитано", exercise))
    notebook.cells = aligned
    return notebook, problems


def _what_is_wrong(cells: list[NotebookNode], released: list[NotebookNode], found: _Match) -> str:
    if any(_reference_answer_id(cell) for cell in cells):
        return "это эталонный ноутбук из notebooks/"
    without = sum(1 for cell in cells if not _grade_id(cell))
    if without:
        return f"у {without} из {len(cells)} ячеек нет метаданных nbgrader: редактор их удалил?"
    return "ячейки переставлены или продублированы"


def _rebuild(cells: list[NotebookNode], released: list[NotebookNode], found: _Match) -> list[NotebookNode]:
    """The release's order, each matched cell with the release's metadata, added cells after their predecessor."""
    by_sub = {sub: rel for rel, sub in found.pairs.items()}
    out: list[NotebookNode] = []
    extras_after: dict[int, list[NotebookNode]] = {}
    anchor = -1
    for sub, cell in enumerate(cells):
        if sub in by_sub:
            anchor = by_sub[sub]
        else:
            extras_after.setdefault(anchor, []).append(_without_grading(cell))
    out.extend(extras_after.get(-1, []))
    for rel, cell in enumerate(released):
        if rel in found.pairs:
            out.append(_with_release_metadata(cells[found.pairs[rel]], cell))
        elif _is_answer(cell):
            out.append(_copy(cell))
        out.extend(extras_after.get(rel, []))
    return out


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
        restored = _copy(cell)
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
    nbtypes.write(inspection.notebook, target)
