"""labs.panels.quiz: the answer key is checked against real Redis; the widgets grade at once."""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import pytest
import redis

from labs.panels.quiz import Question, Quiz, QuizKeyError

pytestmark = pytest.mark.timeout(30)


def xack_deletes(client: redis.Redis, key: str) -> int:
    """Index 1 ("no") when XACK leaves the entry in the stream, as Redis does."""
    stream = key + "s"
    client.xgroup_create(stream, "g", id="0", mkstream=True)
    msg_id = client.xadd(stream, {"a": "1"})
    client.xreadgroup("g", "c", {stream: ">"})
    client.xack(stream, "g", msg_id)
    return 0 if client.xlen(stream) == 0 else 1


def question(answer: int = 1, check: Any = xack_deletes) -> Question:
    return Question("Does XACK delete the entry?", ("yes", "no"), answer, "It only clears the PEL.", check=check)


def test_verify_runs_each_check_against_redis_and_cleans_its_keys(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    quiz = Quiz([question(), Question("No check here", ("a", "b"), 0, "because")])
    results = quiz.verify(redis_client, key_prefix=key_prefix)
    assert [(v.index, v.expected, v.observed) for v in results] == [(0, 1, 1)]
    assert list(redis_client.scan_iter(match=f"{key_prefix}*")) == []


def test_a_key_that_disagrees_with_redis_raises(redis_client: redis.Redis, key_prefix: str) -> None:
    quiz = Quiz([question(answer=0)])
    with pytest.raises(QuizKeyError, match="Redis shows 'no'"):
        quiz.verify(redis_client, key_prefix=key_prefix)
    assert list(redis_client.scan_iter(match=f"{key_prefix}*")) == []  # cleaned even on failure


def test_grade_explains_right_and_wrong_answers_and_keeps_the_score() -> None:
    quiz = Quiz([question(check=None), Question("2 + 2?", ("4", "5"), 0, "arithmetic")])
    wrong = quiz.grade(0, 0)
    right = quiz.grade(1, 0)
    assert not wrong.correct and "Правильный ответ: «no»" in wrong.html and "clears the PEL" in wrong.html
    assert right.correct and "Верно" in right.html
    assert quiz.score == (1, 2)
    assert not quiz.grade(0, None).correct and quiz.score == (1, 2)  # nothing chosen: not counted


def walk(widget: Any) -> list[Any]:
    children = getattr(widget, "children", ())
    return [widget, *(item for child in children for item in walk(child))]


def test_the_widget_answers_at_once_when_the_button_is_clicked() -> None:
    quiz = Quiz([question(check=None), Question("2 + 2?", ("4", "5"), 0, "arithmetic")])
    tree = walk(quiz.widget())
    radios = [x for x in tree if isinstance(x, w.RadioButtons)]
    buttons = [x for x in tree if isinstance(x, w.Button)]
    htmls = [x for x in tree if isinstance(x, w.HTML)]
    assert len(radios) == len(buttons) == 2
    buttons[0].click()
    assert any("Выберите вариант" in h.value for h in htmls)
    radios[0].value = 1
    buttons[0].click()
    radios[1].value = 1
    buttons[1].click()
    assert any("Верно" in h.value for h in htmls) and any("«4»" in h.value for h in htmls)
    assert "1 из 2" in htmls[-1].value


def test_questions_are_validated() -> None:
    with pytest.raises(ValueError, match="two options"):
        Question("q", ("only",), 0, "e")
    with pytest.raises(ValueError, match="not an option"):
        Question("q", ("a", "b"), 2, "e")
    with pytest.raises(ValueError, match="explanation"):
        Question("q", ("a", "b"), 0, "")
    with pytest.raises(ValueError, match="at least one"):
        Quiz([])
