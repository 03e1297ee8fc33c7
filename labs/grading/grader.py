"""One submission, graded: integrity, nbgrader per notebook (the kernel in a sandbox), feedback, labs, gradebook lines.

:func:`grade_submission` is what the CLI runs for each student (several at once, one thread
each). It copies the course (gradebook included) into a folder of the grader's, checks and
repairs each notebook (:mod:`labs.grading.integrity`: a notebook that is not the student edition
is matched to it where that is sound), autogrades each one with nbgrader in a forked child whose
execute step runs the kernel in the submission's sandbox (:mod:`labs.grading.execute`,
:mod:`labs.grading.sandbox`), writes the zeros and reasons into nbgrader's gradebook and
generates the feedback (:mod:`labs.grading.autograde`), runs the labs the submission includes in
the same kind of sandbox (:mod:`labs.grading.labs_checks`), and returns one :class:`Line` per
exercise and lab check. The sandbox sees none of the grader's folders: the gradebook, the
feedback and the logs (``<out>/logs/<student>/``) are written here, outside.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbformat import NotebookNode

from labs import nbtypes
from labs import notebook_release as release
from labs.grading import autograde, integrity, labs_checks
from labs.grading.autograde import Grades
from labs.grading.bwrap import UidPool
from labs.grading.course import ChildContext, Course
from labs.grading.execute import SPEC_VAR
from labs.grading.limits import Limits
from labs.grading.sandbox import RunReport, Sandbox, SandboxSpec
from labs.grading.submissions import Submission

log = logging.getLogger(__name__)

FEEDBACK_TIMEOUT_S = 600.0
NO_VERDICT = ("проверка не показала своего вердикта (✓ или ✗): функция check подменена или её вывод убран — "
              "задание не засчитано")
NBGRADER_MARGIN_S = 300.0  # nbgrader's own work around the sandbox's run: its child is killed only past this


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
    """A graded submission: its lines, the feedback pages, notes, logs, and how long it took."""

    student: str
    lines: list[Line] = field(default_factory=list)
    feedback: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sandbox_start_s: float = 0.0  # launch -> runner and Redis ready, summed over the submission's sandboxes
    runs: int = 0
    walls: dict[str, float] = field(default_factory=dict)  # each notebook's and lab's sandbox, wall seconds
    log_dir: Path | None = None

    @property
    def score(self) -> float:
        return sum(line.score for line in self.lines)

    @property
    def max_score(self) -> float:
        return sum(line.max_score for line in self.lines)


@dataclass(frozen=True)
class Setup:
    """What every submission of a run shares: limits, sandbox or not, the uids, where logs and work go."""

    limits: Limits
    work_dir: Path
    out_dir: Path
    contained: bool = True
    uids: UidPool | None = None


def forkserver() -> ChildContext:
    """A forkserver that has imported nbgrader once: each child starts in milliseconds, not seconds."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["labs.grading.autograde", "labs.grading.execute", "nbgrader.apps", "nbgrader.api"])
    return ctx


def run_child_code(ctx: ChildContext, target: Callable[..., None], args: tuple[object, ...], timeout_s: float,
                   on_timeout: Callable[[], object]) -> int | None:
    """Run ``target(*args)`` in a child; its exit code (negative: the signal that ended it), None when it was
    killed at the limit."""
    proc = ctx.Process(target=target, args=args)
    proc.start()
    proc.join(timeout_s)
    if proc.is_alive():
        on_timeout()
        proc.kill()
        proc.join()
        return None
    return proc.exitcode  # set: the child has ended


def run_child(ctx: ChildContext, target: Callable[..., None], args: tuple[object, ...], timeout_s: float,
              on_timeout: Callable[[], object]) -> bool | None:
    """Run ``target(*args)`` in a child; True/False by its exit code, None when it was killed at the limit."""
    code = run_child_code(ctx, target, args, timeout_s, on_timeout)
    return None if code is None else code == 0


def _checks_of(released: NotebookNode) -> list[str]:
    return [release.exercise_of(gid) or gid for gid, kind in release.grade_ids(released).items() if kind == "check"]


class _Grading:
    """The state of one submission's grading (kept small: the steps are methods)."""

    def __init__(self, sub: Submission, course: Course, spec: SandboxSpec, setup: Setup, ctx: ChildContext) -> None:
        self.sub, self.spec, self.setup, self.ctx = sub, spec, setup, ctx
        self.limits = setup.limits
        self.root = Path(spec.root).parent
        self.course = course.copy_to(self.root / "course")
        self.spec_path = spec.write(self.root / "sandbox.json")
        self.log_dir = Path(spec.log_dir or self.root)
        self.result = Result(sub.student, log_dir=self.log_dir)
        self.zeros: dict[str, dict[str, str]] = {}
        self.whole: dict[str, str] = {}
        self.outcomes: dict[str, dict[str, autograde.Outcome]] = {}

    def shown(self, path: Path) -> str:
        """A log's path as the feedback says it: relative to the grade's output folder."""
        try:
            return str(path.relative_to(self.setup.out_dir))
        except ValueError:
            return str(path)

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
                if problem.whole_notebook:
                    self.whole[name] = problem.reason
                elif problem.exercise:
                    self.zeros.setdefault(name, {}).setdefault(problem.exercise, problem.reason)
                else:
                    self.result.notes.append(f"{name}: {problem.reason}")
            if name not in self.whole:
                gradable.append(name)
        return gradable

    def _report(self, name: str) -> RunReport | None:
        path = Path(self.spec.root) / f"report-{name}.json"
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return RunReport(**data)

    def autograde(self, name: str) -> None:
        log_path = self.log_dir / f"autograde-{name}.log"
        env = {**os.environ, SPEC_VAR: str(self.spec_path)}
        args = (str(self.course.root), self.sub.student, name, self.course.assignment, env, str(log_path))
        code = run_child_code(self.ctx, autograde.autograde_child, args,
                              self.limits.notebook_timeout_s + NBGRADER_MARGIN_S, lambda: None)
        report = self._report(name)
        if report is not None:
            self.result.runs += 1
            self.result.sandbox_start_s += report.ready_s or 0.0
            self.result.walls[name] = report.wall_s
            if note := report.limit_note(self.limits):
                self.result.notes.append(f"{name}: {note}")
            if report.timed_out:
                self.result.notes.append(f"{name}: ноутбук не закончился за {self.limits.notebook_timeout_s} с и "
                                         "остановлен; ячейки после этого не оценены")
        where = f"журнал: {self.shown(log_path)} в папке оценок"
        if code is None:
            self.whole[name] = f"nbgrader не закончил ноутбук за отведённое время и остановлен ({where})"
        elif code != 0:
            self.whole[name] = f"nbgrader не смог оценить ноутбук (код {code}; {where})"
        else:
            graded = self.course.root / "autograded" / self.sub.student / self.course.assignment / f"{name}.ipynb"
            self.outcomes[name] = autograde.exercise_outcomes(nbtypes.read(graded))
            for exercise, outcome in self.outcomes[name].items():
                if outcome.error and not (outcome.message or "").startswith("✓"):
                    self.zeros.setdefault(name, {}).setdefault(exercise, outcome.error)
            for exercise in _checks_of(self.course.released(name)):  # a check that passed without a word
                found = self.outcomes[name].get(exercise)
                if found is None or (found.message is None and found.error is None):
                    self.zeros.setdefault(name, {}).setdefault(exercise, NO_VERDICT)

    def feedback(self) -> Grades:
        args = (str(self.course.root), self.sub.student, self.course.assignment, self.zeros, dict(os.environ),
                str(self.log_dir / "feedback.log"))
        run_child(self.ctx, autograde.feedback_child, args, FEEDBACK_TIMEOUT_S, lambda: None)
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
        found: list[tuple[str, Path, list[str]]] = []
        if self.sub.lab1 is not None:
            found.append(("lab1", self.sub.lab1, labs_checks.lab1_command(self.sub.lab1)))
        if self.sub.lab3 is not None:
            found.append(("lab3", self.sub.lab3, labs_checks.lab3_command(self.sub.lab3)))
        box = Sandbox(self.spec)
        for lab, path, command in found:
            output: list[str] = []
            exit_code: list[int] = []

            def on_event(event: dict[str, Any], output: list[str] = output, exit_code: list[int] = exit_code) -> None:
                if event.get("event") == "output" and isinstance(event.get("text"), str):
                    output.append(event["text"])
                elif event.get("event") == "exit" and isinstance(event.get("code"), int):
                    exit_code.append(event["code"])

            report = box.run(lab, "command", files=labs_checks.companions(path), command=command,
                             wall_s=self.limits.lab_timeout_s, on_event=on_event)
            self.result.runs += 1
            self.result.sandbox_start_s += report.ready_s or 0.0
            self.result.walls[lab] = report.wall_s
            checks = labs_checks.verdict(lab, "".join(output), exit_code=exit_code[0] if exit_code else None,
                                         timed_out=report.timed_out, timeout_s=self.limits.lab_timeout_s,
                                         note=report.limit_note(self.limits))
            for check in checks:
                self.result.lines.append(Line(self.sub.student, lab, check.name, check.score, check.max_score,
                                              "" if check.passed else check.detail, check.detail))


def grade_submission(sub: Submission, course: Course, setup: Setup, ctx: ChildContext) -> Result:
    """Grade one submission, each of its notebooks and labs in a sandbox of its own (see the module docstring)."""
    started = time.monotonic()
    root = setup.work_dir / sub.student
    log_dir = setup.out_dir / "logs" / sub.student
    release_dir = course.root / "release" / course.assignment
    if setup.uids is not None:
        with setup.uids.lease() as uid:
            result = _grade(sub, course, setup, ctx, SandboxSpec(
                str(root / "sandbox"), setup.limits.to_json(), True, uid, str(release_dir), str(log_dir)))
    else:
        result = _grade(sub, course, setup, ctx, SandboxSpec(
            str(root / "sandbox"), setup.limits.to_json(), False, os.getuid(), str(release_dir), str(log_dir)))
    result.seconds = time.monotonic() - started
    log.info("%s: %.1f / %.1f in %.1f s", sub.student, result.score, result.max_score, result.seconds)
    return result


def _grade(sub: Submission, course: Course, setup: Setup, ctx: ChildContext, spec: SandboxSpec) -> Result:
    Path(spec.root).mkdir(parents=True, exist_ok=True)
    grading = _Grading(sub, course, spec, setup, ctx)
    for name in grading.inspect():
        grading.autograde(name)
    grading.notebook_lines(grading.feedback())
    grading.labs()
    return grading.result
