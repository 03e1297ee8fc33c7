"""A "Проверь себя" quiz for the notebooks: ipywidgets that answer at once and explain.

A :class:`Question` has the text, the options, the index of the right one, an explanation
and, for questions about Redis behaviour, a ``check``: a function that runs the behaviour on
a real Redis and returns the index of the option that Redis proves right. Before showing the
quiz, a notebook calls :meth:`Quiz.verify` with its client; an answer key that disagrees
with Redis raises :class:`QuizKeyError`, so the key cannot drift from the server.

    quiz = Quiz([Question("XACK deletes the entry?", ("yes", "no"), 1, "It only clears the PEL.",
                          check=lambda r, key: ...)])
    quiz.verify(client)   # every check against Redis; raises if a key is wrong
    quiz.show()           # RadioButtons + "Проверить" + feedback, per question

The widgets are built only by :meth:`Quiz.widget` / :meth:`Quiz.show`, so the module imports
without a kernel, and :meth:`Quiz.grade` (the feedback logic) is testable without a browser.
"""

from __future__ import annotations

import contextlib
import html
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, cast

import redis

if TYPE_CHECKING:
    import ipywidgets as widgets

Check = Callable[[redis.Redis, str], int]


class QuizKeyError(AssertionError):
    """The answer key says one thing and Redis shows another."""


@dataclass(frozen=True)
class Question:
    """One multiple-choice question; ``check(client, key_prefix)`` returns the index Redis proves."""

    text: str
    options: tuple[str, ...]
    answer: int
    explain: str
    check: Check | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if len(self.options) < 2:
            raise ValueError(f"a question needs at least two options: {self.text!r}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer {self.answer} is not an option index of {self.text!r}")
        if not self.explain:
            raise ValueError(f"a question needs an explanation: {self.text!r}")


@dataclass(frozen=True)
class Feedback:
    """What the student sees after answering one question."""

    correct: bool
    html: str


@dataclass(frozen=True)
class Verified:
    """One check run against Redis: the question's index, the key's answer and what Redis showed."""

    index: int
    expected: int
    observed: int


class Quiz:
    """A list of questions, verified against Redis and shown as ipywidgets."""

    def __init__(self, questions: Sequence[Question], *, title: str = "Проверь себя"):
        if not questions:
            raise ValueError("a quiz needs at least one question")
        self.questions = list(questions)
        self.title = title
        self.answers: dict[int, int] = {}  # question index -> the option the student checked

    def verify(self, client: redis.Redis, *, key_prefix: str | None = None) -> list[Verified]:
        """Run every ``check`` against Redis under its own keys (deleted afterwards); raise on a wrong key."""
        base = key_prefix or f"quiz:{secrets.token_hex(4)}:"
        results: list[Verified] = []
        for index, question in enumerate(self.questions):
            if question.check is None:
                continue
            prefix = f"{base}q{index}:"
            try:
                observed = question.check(client, prefix)
            finally:
                _delete_prefix(client, prefix)
            results.append(Verified(index, question.answer, observed))
            if observed != question.answer:
                raise QuizKeyError(
                    f"question {index + 1} ({question.text[:60]!r}): the key says "
                    f"{question.options[question.answer]!r}, Redis shows {_option(question, observed)!r}"
                )
        return results

    def grade(self, index: int, choice: int | None) -> Feedback:
        """The feedback for choosing option ``choice`` of question ``index`` (None: nothing chosen)."""
        question = self.questions[index]
        if choice is None:
            return Feedback(False, "<span style='color:#a60'>Выберите вариант ответа.</span>")
        self.answers[index] = choice
        correct = choice == question.answer
        right = html.escape(question.options[question.answer])
        verdict = "Верно." if correct else f"Нет. Правильный ответ: «{right}»."
        color = "#080" if correct else "#b00"
        return Feedback(correct, f"<div style='color:{color}'><b>{verdict}</b> {html.escape(question.explain)}</div>")

    @property
    def score(self) -> tuple[int, int]:
        """(right answers so far, questions)."""
        right = sum(1 for i, choice in self.answers.items() if choice == self.questions[i].answer)
        return right, len(self.questions)

    def widget(self) -> widgets.VBox:
        """A VBox: per question the text, RadioButtons, a "Проверить" button and the feedback."""
        import ipywidgets as w

        score = w.HTML(self._score_html())
        boxes = [w.HTML(f"<h3>{html.escape(self.title)}</h3>")]
        for index, question in enumerate(self.questions):
            boxes.append(self._question_box(w, index, question, score))
        boxes.append(score)
        return w.VBox(boxes)

    def show(self) -> widgets.VBox:
        """Display the quiz in the notebook and return the widget."""
        from IPython.display import display

        box = self.widget()
        cast("Callable[[widgets.VBox], None]", display)(box)  # IPython's display is unannotated
        return box

    def _question_box(self, w: ModuleType, index: int, question: Question, score: widgets.HTML) -> widgets.VBox:
        radio = w.RadioButtons(
            options=[(text, i) for i, text in enumerate(question.options)],
            value=None,
            layout=w.Layout(width="max-content"),
        )
        button = w.Button(description="Проверить", button_style="info")
        feedback = w.HTML()

        def on_click(_button: widgets.Button) -> None:
            feedback.value = self.grade(index, radio.value).html
            score.value = self._score_html()

        button.on_click(on_click)
        header = w.HTML(f"<b>{index + 1}. {html.escape(question.text)}</b>")
        return w.VBox([header, radio, button, feedback])

    def _score_html(self) -> str:
        right, total = self.score
        return f"<i>Верных ответов: {right} из {total}</i>"


def _option(question: Question, index: int) -> str:
    return question.options[index] if 0 <= index < len(question.options) else f"<index {index}>"


def _delete_prefix(client: redis.Redis, prefix: str) -> None:
    with contextlib.suppress(redis.RedisError):
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
