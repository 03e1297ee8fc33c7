"""nbgrader's own ``autograde`` and ``generate_feedback`` for one submission, and what they found.

Both run through :class:`nbgrader.apps.NbGraderAPI` in a child process forked from a
forkserver that imported nbgrader once (its import alone takes several seconds), in the
submission's course copy, as the grader (never inside the sandbox: the gradebook is the grader's):

- :func:`autograde_child`: ``nbgrader autograde`` of one notebook (``--notebook``); its execute
  step is :class:`~labs.grading.execute.SandboxedExecute`, which runs the kernel in the
  submission's sandbox and brings back only the outputs;
- :func:`feedback_child`: writes the instructors' zeros into nbgrader's gradebook (``manual_score``
  0 on the check cell, the reason as the answer cell's comment: :mod:`labs.grading.integrity`'s
  problems and the dead kernels, timeouts and errors found here), runs ``generate_feedback``
  (HTML per notebook, the Russian check messages in the cells' outputs) and dumps every grade.

Each child's log (nbgrader's own lines, and the sandbox's) goes to the file the grader names, in
the grade's output folder.

:func:`exercise_outcomes` reads the autograded notebook: per exercise, the error that stopped
its cells (a timeout, a dead kernel, a sandbox limit, ``NOPERM`` from the sandbox's Redis, an
exception) and the check's own message (the verdict line ``✗ NN.K «…»: …``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from nbformat import NotebookNode

from labs import notebook_release as release

if TYPE_CHECKING:
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Grades(TypedDict):
    """``grades.json`` of one submission: did ``generate_feedback`` succeed, and per notebook each graded
    cell's ``[score, max_score]``."""

    feedback_ok: NotRequired[bool]
    notebooks: dict[str, dict[str, list[float]]]


@dataclass(frozen=True)
class Outcome:
    """What the autograded notebook shows for one exercise: the stopping error and the check's message."""

    exercise: str
    error: str | None
    message: str | None


def _load_api(root: Path, notebook: str | None = None) -> NbGraderAPI:
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    if notebook:
        config.CourseDirectory.notebook_id = notebook
    return NbGraderAPI(config=config)


def _enter(root: Path, env: dict[str, str], log_path: Path) -> None:
    """In a child: its environment, the course as cwd, stdout and stderr to the log file ``log_path``."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(root)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log_file, 1)
    os.dup2(log_file, 2)


def generate_child(root: str, assignment: str, env: dict[str, str]) -> None:
    """Child process: ``nbgrader generate_assignment`` (the gradebook and ``release/``); exit 0 on success."""
    course = Path(root)
    _enter(course, env, course / "generate.log")
    result = _load_api(course).generate_assignment(assignment, force=True, create=True)
    sys.stdout.write(result.get("log", "") + result.get("error", ""))
    sys.stdout.flush()
    os._exit(0 if result.get("success") else 1)


def autograde_child(root: str, student: str, notebook: str, assignment: str, env: dict[str, str],
                    log_path: str) -> None:
    """Child process: ``nbgrader autograde`` of ``notebook``; exit 0 on success, 1 with nbgrader's log."""
    course = Path(root)
    _enter(course, env, Path(log_path))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    result = _load_api(course, notebook).autograde(assignment, student, force=True, create=True)
    sys.stdout.write(result.get("log", "") + result.get("error", ""))
    sys.stdout.flush()
    os._exit(0 if result.get("success") else 1)


def feedback_child(root: str, student: str, assignment: str, zeros: dict[str, dict[str, str]],
                   env: dict[str, str], log_path: str) -> None:
    """Child process: zeros and reasons into the gradebook, ``generate_feedback``, ``grades.json``."""
    course = Path(root)
    _enter(course, env, Path(log_path))
    api = _load_api(course)
    with api.gradebook as gb:
        for notebook, by_exercise in zeros.items():
            for exercise, reason in by_exercise.items():
                _zero(gb, notebook, assignment, student, exercise, reason)
    result = api.generate_feedback(assignment, student, force=True)
    grades: Grades = {"feedback_ok": bool(result.get("success")), "notebooks": {}}
    with api.gradebook as gb:
        for notebook in gb.find_assignment(assignment).notebooks:
            with contextlib.suppress(Exception):
                submitted = gb.find_submission_notebook(notebook.name, assignment, student)
                grades["notebooks"][notebook.name] = {
                    grade.name: [float(grade.score or 0), float(grade.max_score or 0)] for grade in submitted.grades
                }
    (course / "grades.json").write_text(json.dumps(grades), encoding="utf-8")
    sys.stdout.write(result.get("log", "") + result.get("error", ""))
    sys.stdout.flush()
    os._exit(0)


def _zero(gb: Gradebook, notebook: str, assignment: str, student: str, exercise: str, reason: str) -> None:
    from nbgrader.api import MissingEntry

    safe = release.safe_id(exercise)
    with contextlib.suppress(MissingEntry):
        grade = gb.find_grade(release.CHECK_PREFIX + safe, notebook, assignment, student)
        grade.manual_score = 0
    with contextlib.suppress(MissingEntry):
        comment = gb.find_comment(release.ANSWER_PREFIX + safe, notebook, assignment, student)
        comment.manual_comment = f"Оценка: 0. Причина: {reason}"
    gb.db.commit()


STOPPED = ("CellTimeoutError", "DeadKernelError", "NotebookStopped", "OutputLimitExceeded")
SANDBOX_DENIED = ("no permissions to run", "DEBUG command not allowed")


def _error_text(cell: NotebookNode) -> str | None:
    """The cell's error as one line; a timeout or a dead kernel wins over the interrupt it caused."""
    errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    if not errors:
        return None
    chosen = next((output for output in errors if output.get("ename") in STOPPED), errors[0])
    text = ANSI.sub("", f"{chosen.get('ename', '')}: {chosen.get('evalue', '')}").strip(": ")
    if any(marker in text for marker in SANDBOX_DENIED):
        text += " (в песочнице проверки эта команда запрещена)"
    return text


def _verdict_text(cell: NotebookNode) -> str | None:
    for output in cell.get("outputs", []):
        text = output.get("data", {}).get("text/plain", "")
        if isinstance(text, list):
            text = "".join(text)
        if text.startswith(("✗", "✓")):
            return str(text).strip()
    return None


def exercise_outcomes(notebook: NotebookNode) -> dict[str, Outcome]:
    """Per exercise id: the first error among its non-check cells and its check's verdict line."""
    errors: dict[str, str] = {}
    messages: dict[str, str] = {}
    for cell in notebook.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        exercise = cell.get("metadata", {}).get("exercise") or release.exercise_of(grade_id)
        if not exercise or cell.cell_type != "code":
            continue
        if grade_id.startswith(release.CHECK_PREFIX):
            verdict = _verdict_text(cell)
            error = _error_text(cell)
            if verdict:
                messages[exercise] = verdict
            elif error and not error.startswith("CheckFailed"):
                errors.setdefault(exercise, f"ячейка проверки: {error}")
        elif (error := _error_text(cell)) is not None:
            where = "ячейка решения" if grade_id.startswith(release.ANSWER_PREFIX) else "ячейка задания"
            errors.setdefault(exercise, f"{where}: {error}")
    ids = sorted(set(errors) | set(messages))
    return {ex: Outcome(ex, errors.get(ex), messages.get(ex)) for ex in ids}
