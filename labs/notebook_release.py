"""The release of the student edition: nbgrader cell metadata, and the ``check("NN.K")`` call that names an exercise.

One home for what both the exercises (:mod:`labs.exercises.edition`, ``make student``) and the
grading (:mod:`labs.grading`, ``make grade``) need, below both rooms: the pattern of a check
call (:data:`CHECK_CALL`, :func:`check_ids`), the grade ids and their exercise ids
(:func:`safe_id`, :func:`exercise_of`), and the metadata itself.

The student edition blanks the solution regions and drops the reference's nbgrader metadata.
:func:`graded` is the post-step applied to its output: it matches each cell of the edition with
the reference cell of the same id and writes nbgrader's schema-3 metadata, the same that
``nbgrader generate_assignment`` reads:

- a **solution cell** (reference ``nbgrader.solution``): ``answer-NN_K`` (``answer-NN_K-b`` for
  an exercise's second one), editable, not graded by itself;
- a **check cell** (``check("NN.K")``): ``check-NN_K``, an autograded test cell worth
  :data:`POINTS_PER_CHECK`; its failure is :class:`~labs.exercises.notebook.CheckFailed`, an
  ``AssertionError``, so nbgrader scores it zero and its output keeps the Russian message;
- **every other cell** (prose, setup, preparing cells, the banner): locked read-only,
  ``cell-<cell id>``, with Jupyter's ``editable``/``deletable`` off.

nbgrader's grade ids allow ``[a-zA-Z0-9_-]`` only, hence ``NN_K`` for the exercise id ``NN.K``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NotRequired, TypedDict

from nbformat import NotebookNode

from labs import nbtypes

POINTS_PER_CHECK = 1.0
SCHEMA_VERSION = 3
ANSWER_PREFIX = "answer-"
CHECK_PREFIX = "check-"
CELL_PREFIX = "cell-"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_\-]")
CHECK_CALL = re.compile(r"^check\(\s*[\"'](?P<id>\d{2}\.\d+)[\"']", re.MULTILINE)


def safe_id(exercise_id: str) -> str:
    """``"02.4"`` -> ``"02_4"`` (``"02.1-b"`` -> ``"02_1-b"``): nbgrader's grade-id alphabet."""
    return _UNSAFE.sub("_", exercise_id)


def exercise_of(grade_id: str) -> str | None:
    """The exercise id an ``answer-``/``check-`` grade id belongs to: ``"check-02_4"`` -> ``"02.4"``."""
    for prefix in (ANSWER_PREFIX, CHECK_PREFIX):
        if grade_id.startswith(prefix):
            notebook, _, rest = grade_id[len(prefix) :].partition("_")
            return f"{notebook}.{rest.split('-')[0]}"
    return None


def check_ids(source: str) -> list[str]:
    """The exercise ids a cell checks: ``check("02.4")`` at the start of a line gives ``["02.4"]``."""
    return [match["id"] for match in CHECK_CALL.finditer(source)]


class NbgraderMeta(TypedDict):
    """A cell's ``metadata.nbgrader`` as nbgrader 0.9 reads it (``points`` on a graded cell only)."""

    grade: bool
    grade_id: str
    locked: bool
    schema_version: int
    solution: bool
    task: bool
    points: NotRequired[float]


def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False) -> NbgraderMeta:
    meta: NbgraderMeta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = POINTS_PER_CHECK
    return meta


def cell_metadata(cell: NotebookNode, reference: NotebookNode | None) -> NbgraderMeta:
    """The nbgrader metadata for one edition cell, given the reference cell of the same id (if any)."""
    ref_nbgrader = reference.get("metadata", {}).get("nbgrader", {}) if reference else {}
    if ref_nbgrader.get("solution"):
        return _meta(ANSWER_PREFIX + safe_id(ref_nbgrader["grade_id"]), solution=True)
    checked = check_ids(cell.source) if cell.cell_type == "code" else []
    if checked:
        return _meta(CHECK_PREFIX + safe_id(checked[0]), grade=True, locked=True)
    return _meta(CELL_PREFIX + safe_id(str(cell.get("id") or "")), locked=True)


def graded(student: NotebookNode, reference: NotebookNode) -> NotebookNode:
    """Write nbgrader metadata on every cell of the student edition ``student`` (in place, returned)."""
    by_id = {cell.get("id"): cell for cell in reference.cells}
    seen: set[str] = set()
    for index, cell in enumerate(student.cells):
        meta = cell_metadata(cell, by_id.get(cell.get("id")))
        if meta["grade_id"] in seen or meta["grade_id"] == CELL_PREFIX:
            meta["grade_id"] = f"{meta['grade_id']}-{index}"
        seen.add(meta["grade_id"])
        cell.metadata["nbgrader"] = meta
        if meta["locked"]:
            cell.metadata["editable"] = False
            cell.metadata["deletable"] = False
    return student


def graded_text(text: str, reference_path: Path) -> str:
    """:func:`graded` on the text of an edition notebook; the reference is read from ``reference_path``."""
    return nbtypes.writes(graded(nbtypes.reads(text), nbtypes.read(reference_path)))


def grade_ids(notebook: NotebookNode) -> dict[str, str]:
    """Grade id -> cell kind (``answer``/``check``/``cell``) of a released notebook."""
    found = {}
    for cell in notebook.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id:
            found[grade_id] = grade_id.split("-")[0]
    return found
