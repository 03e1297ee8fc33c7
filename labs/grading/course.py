"""An nbgrader course directory: the released assignment, its gradebook, and the config every step reads.

:func:`build_course` writes ``source/<assignment>/`` (the student edition with the metadata of
:mod:`labs.notebook_release`), an ``nbgrader_config.py`` (its execute step is the sandbox's), and runs
nbgrader's own ``generate_assignment``, which fills ``gradebook.db`` (the locked cells'
source and checksums, the test cells' points) and writes ``release/``. Each submission is
then graded in a copy of that directory (:func:`Course.copy_to`), so no two share a gradebook
or a file.

:func:`small_notebook` cuts a reference notebook down to its setup cell and its exercises
(the task text, preparing, solution and check cells): every exercise runs right after the
setup (``notebooks/CONVENTIONS.md``), so this is a real notebook that grades in seconds.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from multiprocessing.context import ForkContext, ForkServerContext
from pathlib import Path

from nbformat import NotebookNode

from labs import nbtypes

log = logging.getLogger(__name__)

ASSIGNMENT = "workbook"
COURSE_ID = "redis-broker"
CONFIG_NAME = "nbgrader_config.py"
EXECUTE = "labs.grading.execute.SandboxedExecute"
ChildContext = ForkServerContext | ForkContext
"""Where nbgrader's steps run as children: the grader's forkserver (nbgrader imported once), a plain fork in tests."""


def config_text(root: Path) -> str:
    """``nbgrader_config.py``: the course, nbgrader's Execute replaced by the sandbox's (:mod:`labs.grading.execute`:
    the kernel runs in the submission's sandbox, the scoring here; the limits travel with the sandbox's spec)."""
    return "\n".join(
        [
            "c = get_config()  # noqa: F821 (written by labs.grading.course)",
            f"c.CourseDirectory.root = {str(root)!r}",
            f"c.CourseDirectory.course_id = {COURSE_ID!r}",
            f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}",
            "c.ClearSolutions.code_stub = {'python': '# ваш код'}",
            "c.ClearSolutions.text_stub = '_Ваш ответ:_'",
            "c.Autograde.autograde_preprocessors = [",
            f"    {EXECUTE!r},",
            "    'nbgrader.preprocessors.IgnorePattern',",
            "    'nbconvert.preprocessors.ClearMetadataPreprocessor',",
            "    'nbgrader.preprocessors.LimitOutput',",
            "    'nbgrader.preprocessors.SaveAutoGrades',",
            "    'nbgrader.preprocessors.AssignLatePenalties',",
            "    'nbgrader.preprocessors.CheckCellMetadata',",
            "]",
            "",
        ]
    )


def nbgrader(root: Path, *args: str, env: dict[str, str] | None = None, timeout_s: float | None = None) -> None:
    """Run ``nbgrader <args>`` in the course directory ``root``; raise with its log tail on failure."""
    env = dict(env if env is not None else os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs `alembic`
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({done.returncode}):\n{tail}")


@dataclass(frozen=True)
class Course:
    """A built course directory and the notebooks of its one assignment."""

    root: Path
    notebooks: tuple[str, ...]
    assignment: str = ASSIGNMENT

    def released(self, name: str) -> NotebookNode:
        """The notebook ``name`` (no ``.ipynb``) as nbgrader released it."""
        path = self.root / "release" / self.assignment / f"{name}.ipynb"
        return nbtypes.read(path)

    def copy_to(self, target: Path) -> Course:
        """A copy of this course in ``target`` (gradebook included), its config pointing there."""
        target.mkdir(parents=True, exist_ok=True)
        for part in ("source", "release"):
            shutil.copytree(self.root / part, target / part, dirs_exist_ok=True)
        shutil.copy2(self.root / "gradebook.db", target / "gradebook.db")
        (target / CONFIG_NAME).write_text(config_text(target), encoding="utf-8")
        return Course(target, self.notebooks, self.assignment)


def build_course(root: Path, released: Sequence[tuple[str, str]], ctx: ChildContext | None = None) -> Course:
    """A course in ``root`` from ``(name, notebook text)`` pairs, through ``nbgrader generate_assignment``.

    With ``ctx`` (the grader's forkserver, nbgrader already imported) it runs in a forked child;
    otherwise as ``python -m nbgrader`` (several seconds more: nbgrader's import).
    """
    source = root / "source" / ASSIGNMENT
    source.mkdir(parents=True, exist_ok=True)
    for name, text in released:
        (source / f"{name}.ipynb").write_text(text, encoding="utf-8")
    (root / CONFIG_NAME).write_text(config_text(root), encoding="utf-8")
    if ctx is None:
        nbgrader(root, "generate_assignment", ASSIGNMENT, "--force", "--create")
    else:
        from labs.grading.autograde import generate_child

        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs `alembic`
        proc = ctx.Process(target=generate_child, args=(str(root), ASSIGNMENT, env))
        proc.start()
        proc.join()
        if proc.exitcode != 0:
            log_text = (root / "generate.log").read_text(encoding="utf-8", errors="replace")
            raise RuntimeError("nbgrader generate_assignment failed:\n" + "\n".join(log_text.splitlines()[-15:]))
    return Course(root, tuple(name for name, _ in released))


def student_release(reference: Path) -> str:
    """The student edition of ``reference`` with nbgrader metadata (``make student``'s text)."""
    from labs.exercises import edition  # imported here: nbgrader's import takes about a second

    return edition.student_text(reference)


def small_notebook(reference: Path, target: Path, exercises: Collection[str] | None = None) -> Path:
    """``reference`` cut to its setup cell and its exercises (only ``exercises`` when given), written to ``target``."""
    nb = nbtypes.read(reference)
    first_code = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    keep = {first_code}
    for index, cell in enumerate(nb.cells):
        if cell.metadata.get("exercise") and (exercises is None or cell.metadata["exercise"] in exercises):
            keep.add(index)
            if index and nb.cells[index - 1].cell_type == "markdown":
                keep.add(index - 1)
    nb.cells = [cell for index, cell in enumerate(nb.cells) if index in keep]
    target.parent.mkdir(parents=True, exist_ok=True)
    nbtypes.write(nb, target)
    return target


def course_for(references: Sequence[Path], root: Path | None = None, ctx: ChildContext | None = None) -> Course:
    """A course whose assignment is the student release of each reference notebook."""
    root = root or Path(tempfile.mkdtemp(prefix="grading-course-"))
    released = [(path.stem, student_release(path)) for path in references]
    log.info("building the course in %s from %d notebook(s)", root, len(released))
    return build_course(root, released, ctx)


__all__ = ["ASSIGNMENT", "Course", "build_course", "course_for", "small_notebook"]
