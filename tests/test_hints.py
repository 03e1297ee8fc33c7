"""The hints of every exercise teach without handing over the answer.

Each exercise has two steps (``nudge``: where to look; ``hint``: the command or the idea), and
neither contains the reference solution's code: no statement of the solution region, and no
stretch of it longer than ``MAX_SHARED`` characters that the task itself (the comment lines of
the student's cell) does not already say. Quotes and spaces are normalised first, so
``r.xack(s, 'g')`` and ``r.xack(s,"g")`` count as the same code.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

import pytest

from labs import nbtypes
from labs.exercises import edition
from labs.exercises.exercise import Exercise
from labs.exercises.notebook import find

MAX_SHARED = 40
REGION = re.compile(r"### BEGIN SOLUTION\n(?P<code>.*?)### END SOLUTION", re.DOTALL)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("'", '"').replace("`", "")).strip()


def _solutions() -> Iterator[tuple[str, str]]:
    for path in sorted(edition.SOURCE_DIR.glob("*.ipynb")):
        for cell in nbtypes.read(path).cells:
            if edition.is_solution(cell):
                yield cell.metadata["exercise"], cell.source


SOLUTIONS = list(_solutions())


def _code_lines(source: str) -> list[str]:
    lines = []
    for region in REGION.finditer(source):
        for line in region["code"].splitlines():
            code = _norm(line.split("  #")[0])
            if code and not code.startswith(("#", "print(")):
                lines.append(code)
    return lines


def _task(source: str) -> str:
    return _norm(" ".join(line for line in source.splitlines() if line.lstrip().startswith("#")))


def shared_code(exercise: Exercise, solution: str) -> str:
    """The longest stretch of the solution's code in the hints that the task does not already give."""
    hints, task, worst = _norm(f"{exercise.nudge} {exercise.hint}"), _task(solution), ""
    for line in _code_lines(solution):
        matcher = difflib.SequenceMatcher(None, hints, line, autojunk=False)
        match = matcher.find_longest_match(0, len(hints), 0, len(line))
        stretch = line[match.b : match.b + match.size]
        if len(stretch) > len(worst) and stretch.strip() not in task:
            worst = stretch
    return worst


@pytest.mark.parametrize(("exercise_id", "solution"), SOLUTIONS, ids=[e for e, _ in SOLUTIONS])
def test_a_hint_comes_in_two_steps_and_never_holds_the_solutions_code(exercise_id: str, solution: str) -> None:
    exercise = find(exercise_id)
    assert exercise.nudge and exercise.hint and exercise.nudge != exercise.hint, exercise_id
    hints = _norm(f"{exercise.nudge} {exercise.hint}")
    for line in _code_lines(solution):
        assert len(line) < 15 or line not in hints, f"{exercise_id}: the hint holds the statement {line!r}"
    stretch = shared_code(exercise, solution)
    assert len(stretch) <= MAX_SHARED, f"{exercise_id}: the hint shares {stretch!r} with the solution"


def test_the_leak_detector_catches_a_hint_that_is_the_solution() -> None:
    exercise_id, solution = SOLUTIONS[0]
    code = " ".join(_code_lines(solution))
    leaky = Exercise(id=exercise_id, title="t", verify=find(exercise_id).verify, nudge="n", hint=code)
    assert len(shared_code(leaky, solution)) > MAX_SHARED


def test_the_check_box_shows_the_nudge_first_and_the_second_step_behind_another_click() -> None:
    from labs.exercises.exercise import evaluate

    exercise = find("02.4")
    box = evaluate(exercise, {})._repr_html_()
    assert box.index("Подсказка") < box.index("Ещё подсказка")
    assert box.index(exercise.nudge[:20]) < box.index("Ещё подсказка") < box.index("XAUTOCLAIM")
