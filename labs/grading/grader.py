"""One submission, graded: sandbox, integrity, nbgrader per notebook, feedback, labs, gradebook lines.

:func:`grade_submission` is what the CLI runs for each student (several at once, one thread
each): in a :class:`~labs.grading.sandbox.Sandbox` it copies the course, checks and repairs each
notebook (:mod:`labs.grading.integrity`), autogrades each one in a forked child with the
notebook's time limit, writes the zeros and reasons into nbgrader's gradebook and generates
the feedback (:mod:`labs.grading.autograde`), runs the labs the submission includes
(:mod:`labs.grading.labs_checks`), and returns one :class:`Line` per exercise and lab check.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from labs.grading import autograde, integrity, labs_checks, release
from labs.grading.autograde import Grades
from labs.grading.course import Course, Limits
from labs.grading.sandbox import Sandbox
from labs.grading.submissions import Submission

log = logging.getLogger(__name__)

FEEDBACK_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Line:
    """One gradebook line: a student's score for one exercise (or lab check), and why it was lost."""

    student: str
    part: str
    item: str
    score: float
    max_score: float
    reason: str = ""
    message: str = ""


@dataclass
class Result:
    """A graded submission: its lines, the feedback pages, notes, and how long it took."""

    student: str
    lines: list[Line] = field(default_factory=list)
    feedback: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(line.score for line in self.lines)

    @property
    def max_score(self) -> float:
        return sum(line.max_score for line in self.lines)


def forkserver() -> BaseContext:
    """A forkserver that has imported nbgrader once: each child starts in milliseconds, not seconds."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["labs.grading.autograde", "nbgrader.apps", "nbgrader.api"])
    return ctx


def run_child(ctx: BaseContext, target: Callable[..., None], args: tuple[object, ...], timeout_s: float,
              on_timeout: Callable[[], object]) -> bool | None:
    """Run ``target(*args)`` in a child; True/False by its exit code, None when it was killed at the limit."""
    proc = ctx.Process(target=target, args=args)  # type: ignore[attr-defined]
    proc.start()
    proc.join(timeout_s)
    if proc.is_alive():
        on_timeout()
        proc.kill()
        proc.join()
        return None
    return bool(proc.exitcode == 0)


def _checks_of(released: NotebookNode) -> list[str]:
    return [release.exercise_of(gid) or gid for gid, kind in release.grade_ids(released).items() if kind == "check"]


class _Grading:
    """The state of one submission's grading (kept small: the steps are methods)."""

    def __init__(self, sub: Submission, course: Course, box: Sandbox, limits: Limits, ctx: BaseContext) -> None:
        self.sub, self.box, self.limits, self.ctx = sub, box, limits, ctx
        self.course = course.copy_to(box.root / "course", limits)
        self.result = Result(sub.student)
        self.zeros: dict[str, dict[str, str]] = {}
        self.whole: dict[str, str] = {}
        self.outcomes: dict[str, dict[str, autograde.Outcome]] = {}

    def submitted_path(self, notebook: str) -> Path:
        return self.course.root / "submitted" / self.sub.student / self.course.assignment / f"{notebook}.ipynb"

    def inspect(self) -> list[str]:
        """Integrity of each notebook; the names nbgrader may grade."""
        gradable = []
        for name in self.course.notebooks:
            path = self.sub.notebooks.get(name)
            if path is None:
                self.whole[name] = self.sub.problem or f"ноутбук {name}.ipynb не сдан"
                continue
            inspection = integrity.inspect(path, self.course.released(name))
            if not inspection.readable:
                self.whole[name] = inspection.problems[0].reason
                continue
            integrity.write(inspection, self.submitted_path(name))
            for problem in inspection.problems:
                if problem.exercise:
                    self.zeros.setdefault(name, {}).setdefault(problem.exercise, problem.reason)
                else:
                    self.result.notes.append(f"{name}: {problem.reason}")
            gradable.append(name)
        return gradable

    def autograde(self, name: str) -> None:
        args = (str(self.course.root), self.sub.student, name, self.course.assignment, self.box.env())
        done = run_child(self.ctx, autograde.autograde_child, args, self.limits.notebook_timeout_s,
                         lambda: self.box.kill_all(keep_redis=True))
        self.box.kill_all(keep_redis=True)  # the kernel's leftovers: experiment servers, workers
        if done is None:
            self.whole[name] = f"ноутбук не закончился за {self.limits.notebook_timeout_s} с и остановлен"
        elif not done:
            self.whole[name] = "nbgrader не смог оценить ноутбук (см. autograde-*.log в рабочем каталоге)"
        else:
            graded = self.course.root / "autograded" / self.sub.student / self.course.assignment / f"{name}.ipynb"
            self.outcomes[name] = autograde.exercise_outcomes(nbformat.read(str(graded), as_version=4))  # type: ignore[no-untyped-call]
            for exercise, outcome in self.outcomes[name].items():
                if outcome.error and not (outcome.message or "").startswith("✓"):
                    self.zeros.setdefault(name, {}).setdefault(exercise, outcome.error)
        if not self.box.redis_alive():
            self.result.notes.append(f"{name}: Redis песочницы остановился; запущен заново")
            self.box.kill_all()
            self.box.start_redis()

    def feedback(self) -> Grades:
        args = (str(self.course.root), self.sub.student, self.course.assignment, self.zeros, self.box.env())
        run_child(self.ctx, autograde.feedback_child, args, FEEDBACK_TIMEOUT_S, self.box.kill_all)
        grades_file = self.course.root / "grades.json"
        if not grades_file.exists():
            return {"notebooks": {}}
        feedback_dir = self.course.root / "feedback" / self.sub.student / self.course.assignment
        self.result.feedback = sorted(feedback_dir.glob("*.html"))
        grades: Grades = json.loads(grades_file.read_text(encoding="utf-8"))  # as feedback_child wrote it
        return grades

    def notebook_lines(self, grades: Grades) -> None:
        for name in self.course.notebooks:
            if name in self.whole or name not in grades["notebooks"]:
                reason = self.whole.get(name, "нет оценок в журнале nbgrader")
                for exercise in _checks_of(self.course.released(name)):
                    self.result.lines.append(
                        Line(self.sub.student, name, exercise, 0.0, release.POINTS_PER_CHECK, reason))
                continue
            for grade_id, (score, max_score) in sorted(grades["notebooks"][name].items()):
                found = release.exercise_of(grade_id)
                if not grade_id.startswith(release.CHECK_PREFIX) or found is None:
                    continue
                exercise = found
                outcome = self.outcomes.get(name, {}).get(exercise)
                message = (outcome.message if outcome else None) or ""
                reason = "" if score >= max_score else (
                    self.zeros.get(name, {}).get(exercise) or message or "проверка не пройдена")
                self.result.lines.append(Line(self.sub.student, name, exercise, score, max_score, reason, message))

    def labs(self) -> None:
        env = self.box.env()
        found: list[tuple[str, list[str], dict[str, str]]] = []
        if self.sub.lab1 is not None:
            found.append(("lab1", labs_checks.lab1_command(self.sub.lab1, self.box.redis_url), env))
        if self.sub.lab3 is not None:
            lab3_env = labs_checks.lab3_env(env, self.box.root / "lab3")
            found.append(("lab3", labs_checks.lab3_command(self.sub.lab3), lab3_env))
        for lab, command, lab_env in found:
            checks = labs_checks.run_checker(lab, command, env=lab_env, cwd=self.sub.root,
                                             timeout_s=self.limits.lab_timeout_s,
                                             on_timeout=lambda: self.box.kill_all(keep_redis=True))
            self.box.kill_all(keep_redis=True)
            for check in checks:
                self.result.lines.append(Line(self.sub.student, lab, check.name, check.score, check.max_score,
                                              "" if check.passed else check.detail, check.detail))


def grade_submission(sub: Submission, course: Course, work_dir: Path, limits: Limits, ctx: BaseContext) -> Result:
    """Grade one submission in a sandbox of its own under ``work_dir`` (see the module docstring)."""
    started = time.monotonic()
    with Sandbox(work_dir / sub.student) as box:
        grading = _Grading(sub, course, box, limits, ctx)
        for name in grading.inspect():
            grading.autograde(name)
        grading.notebook_lines(grading.feedback())
        grading.labs()
    grading.result.seconds = time.monotonic() - started
    log.info("%s: %.1f / %.1f in %.1f s", sub.student, grading.result.score, grading.result.max_score,
             grading.result.seconds)
    return grading.result
