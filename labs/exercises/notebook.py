"""The entry point a notebook calls: ``check("02.4")`` after the student's solution cell.

:func:`check` finds the exercise by its id (module ``labs.exercises.nb02`` for ``"02.4"``),
runs it against the calling cell's namespace (the notebook's globals), shows the verdict as a
coloured box with the hint one click away (an HTML ``<details>``), and raises
:class:`CheckFailed` when the check did not pass. The exception renders in IPython as one
short line (``_render_traceback_``), not a traceback: the box above it already says what to
look at. In the reference notebooks a failed check therefore fails nbval; in the student
edition the check cells carry the ``raises-exception`` tag, so "Run All" goes on past them.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import cast

from labs.exercises import attempts
from labs.exercises.exercise import Exercise, Verdict, evaluate


class CheckFailed(AssertionError):
    """A check did not pass; ``verdict`` says why. Shown in a notebook as one line, no traceback."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.text)
        self.verdict = verdict

    def _render_traceback_(self) -> list[str]:
        """IPython shows these lines instead of the traceback: one red line (the box above has the rest)."""
        return [f"\x1b[31mПроверка {self.verdict.exercise.id} не пройдена\x1b[0m: что не так и подсказка — выше."]


def exercises_of(notebook: str) -> tuple[Exercise, ...]:
    """The exercises of notebook ``"02"`` (module ``labs.exercises.nb02``, its ``EXERCISES``)."""
    try:
        module = importlib.import_module(f"labs.exercises.nb{notebook}")
    except ModuleNotFoundError as exc:
        raise KeyError(f"no exercise module for notebook {notebook!r} (labs/exercises/nb{notebook}.py)") from exc
    return tuple(module.EXERCISES)


def find(exercise_id: str) -> Exercise:
    """The exercise with this id, e.g. ``"02.4"``; KeyError with the known ids otherwise."""
    notebook = exercise_id.partition(".")[0]
    known = exercises_of(notebook)
    for exercise in known:
        if exercise.id == exercise_id:
            return exercise
    raise KeyError(f"no exercise {exercise_id!r}; notebook {notebook} has {[e.id for e in known]}")


def check(exercise_id: str, namespace: Mapping[str, object] | None = None) -> None:
    """Check exercise ``exercise_id`` against ``namespace`` (default: the caller's globals).

    Shows the verdict (in a notebook: HTML with the hint behind "Подсказка") and raises
    :class:`CheckFailed` when it did not pass. Returns nothing, so a notebook cell shows the
    verdict once; tests call :func:`labs.exercises.exercise.evaluate` for the Verdict itself.
    """
    exercise = find(exercise_id)
    names = namespace if namespace is not None else sys._getframe(1).f_globals
    failure = attempts.failed_run(exercise.id)
    if failure is not None:  # the student edition: judge the latest run only, not what an earlier one left
        verdict = with_retry(Verdict(exercise, False, failed_run_message(failure)), names, ran=True)
    else:
        verdict = with_retry(evaluate(exercise, names), names)
    _show(verdict)
    if not verdict.passed:
        raise CheckFailed(verdict)


def failed_run_message(failure: str) -> str:
    """What a check says when the latest run of the solution cell raised."""
    return (
        f"Последний запуск ячейки с решением закончился ошибкой ({failure}). Проверка судит только последнюю "
        "попытку, а её результата нет: исправьте ошибку и выполните ячейку снова."
    )


def with_retry(verdict: Verdict, names: Mapping[str, object], *, ran: bool | None = None) -> Verdict:
    """A failed verdict on a cell that ran gets the way to try again from a fresh state."""
    exercise = verdict.exercise
    if ran is None:
        ran = all(name in names for name in (*exercise.setup, *exercise.needs))
    if verdict.passed or not ran or verdict.message.startswith("Redis не отвечает"):
        return verdict
    from labs.exercises.student import retry_advice  # reads the notebooks once, on the first failure

    return dataclasses.replace(verdict, retry=retry_advice(exercise.id))


def hint(exercise_id: str) -> None:
    """Show the hint of ``exercise_id`` before trying (the same text a failed check shows)."""
    exercise = find(exercise_id)
    steps = " ".join(step for step in (exercise.nudge, exercise.hint) if step)
    _display_html(
        f"<details open><summary>Подсказка к {exercise.id} «{html.escape(exercise.title)}»</summary>"
        f"{html.escape(exercise.nudge or exercise.hint)}"
        + (f"<details><summary>Ещё подсказка</summary>{html.escape(exercise.hint)}</details>" if exercise.nudge else "")
        + "</details>",
        f"Подсказка к {exercise.id}: {steps}",
    )


def _show(verdict: Verdict) -> None:
    _display_html(verdict._repr_html_(), verdict.text)


def _display_html(markup: str, text: str) -> None:
    """HTML in a notebook (with a plain-text twin for nbval and terminals); nothing elsewhere."""
    try:
        from IPython.display import display
    except ImportError:  # no IPython: the verdict is returned or raised, which says it all
        return
    show = cast("Callable[..., None]", display)  # IPython's display is unannotated: any objects, flags by name
    show({"text/html": markup, "text/plain": text}, raw=True)
