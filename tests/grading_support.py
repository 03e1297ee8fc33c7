"""One graded class for the grading tests: the small notebook 05, submissions made from it, graded once.

Notebook 05's exercises are the cheapest of the workbook (about 2 s together); the course is its
setup cell and exercises (:func:`labs.grading.course.small_notebook`), built through nbgrader
once per test module, and every submission is graded in the bubblewrap sandbox (``make grade``'s
default; ``tests/test_grading_hostile.py`` grades hostile ones). The class: solved (with the
reference ``lab1.py``), untouched, one wrong answer (with a ``lab1.py`` that never returns), a
file that is not JSON (with the reference ``lab1.py``), and the bad kinds two per submission
(exercises 05.1 and 05.2 spoiled, 05.3 solved), so each submission shows both the zero with its
reason and the rest graded. """

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

from labs import nbtypes
from labs.grading import bwrap, course, demo, grader, submissions
from labs.grading.limits import Limits

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_read_loop_and_idempotency.ipynb"
NAME = NOTEBOOK.stem
LIMITS = Limits(cell_timeout_s=30, notebook_timeout_s=150, lab_timeout_s=30)
# student -> (kind spoiling 05.1, kind spoiling 05.2); None: solved
PAIRS: dict[str, tuple[str | None, str | None]] = {
    "solved": (None, None),
    "wrong-lab-never-exits": (None, "wrong"),
    "hang-raise": ("hang", "raise"),
    "flushall-shutdown": ("flushall", "shutdown"),
    "segfault-kernel-death": ("segfault", "kernel-death"),
    "deleted-edited": ("deleted-locked", "edited-locked"),
}


@dataclass
class GradedClass:
    course: course.Course
    folder: Path
    results: dict[str, grader.Result]
    setup: grader.Setup


def make_submissions(folder: Path, built: course.Course, reference: NotebookNode) -> None:
    released = built.released(NAME)
    for student, (first, second) in PAIRS.items():
        nb = demo.solved(released, reference)
        for kind, exercise in ((first, "05.1"), (second, "05.2")):
            if kind:
                nb = demo.SPOILERS[kind](nb, exercise)
        demo.write_submission(folder, student, NAME, nb)
    demo.write_submission(folder, "untouched", NAME, released)
    broken = nbtypes.writes(demo.solved(released, reference))[:-300]
    demo.write_submission(folder, "invalid-json", NAME, broken)
    shutil.copy2(ROOT / "solutions" / "lab1.py", folder / "solved" / "lab1.py")
    shutil.copy2(ROOT / "solutions" / "lab1.py", folder / "invalid-json" / "lab1.py")
    (folder / "wrong-lab-never-exits" / "lab1.py").write_text(demo.NEVER_EXITS, encoding="utf-8")


def setup_for(tmp: Path, limits: Limits, jobs: int, *, contained: bool = True) -> grader.Setup:
    """The grader's setup the CLI would make (sandboxed unless ``contained`` is False)."""
    return grader.Setup(limits, tmp / "sandboxes", tmp / "out", contained, bwrap.UidPool(jobs) if contained else None)


def build_course(tmp: Path, notebook: Path = NOTEBOOK,
                 exercises: set[str] | None = None) -> tuple[course.Course, course.ChildContext, NotebookNode]:
    """The course of the small ``notebook`` (only ``exercises``, when given), built once per module; the grader's
    forkserver and the small reference."""
    small = course.small_notebook(notebook, tmp / "small" / notebook.name, exercises)
    ctx = grader.forkserver()
    built = course.course_for([small], tmp / "course", ctx)
    return built, ctx, nbtypes.read(small)


def grade_folder(tmp: Path, built: course.Course, ctx: course.ChildContext, folder: Path, setup: grader.Setup,
                 jobs: int) -> dict[str, grader.Result]:
    """Every submission in ``folder``, ``jobs`` at a time, as ``make grade`` does."""
    subs = submissions.find_submissions(folder, built.notebooks, tmp / "unpacked")
    with ThreadPoolExecutor(jobs) as pool:
        graded = list(pool.map(lambda s: grader.grade_submission(s, built, setup, ctx), subs))
    return {result.student: result for result in graded}


def grade_class(tmp: Path, jobs: int = 3) -> GradedClass:
    built, ctx, reference = build_course(tmp)
    folder = tmp / "submissions"
    make_submissions(folder, built, reference)
    setup = setup_for(tmp, LIMITS, jobs)
    return GradedClass(built, folder, grade_folder(tmp, built, ctx, folder, setup, jobs), setup)
