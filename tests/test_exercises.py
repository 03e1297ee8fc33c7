"""labs.exercises.exercise and labs.exercises.notebook: every outcome is one Russian line, never a traceback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import redis

from labs.exercises import CheckFailed, check, hint
from labs.exercises.exercise import Exercise, Miss, evaluate, expect
from labs.exercises.notebook import exercises_of, find

pytestmark = pytest.mark.timeout(30)


def _verify(ns: Mapping[str, Any]) -> str:
    expect(ns["answer"] == 42, "Ответ не тот: перечитайте условие.")
    return "Всё верно."


def _broken(ns: Mapping[str, Any]) -> str:
    return str(ns["answer"]["field"])  # TypeError on an int: the student's object has another shape


def _redis_down(ns: Mapping[str, Any]) -> str:
    redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2).ping()
    return "unreachable"


EX = Exercise(id="99.1", title="Проба", needs=("answer",), setup=(), verify=_verify, hint="Ответ — число.")


def test_a_right_result_passes_and_a_wrong_one_says_why() -> None:
    assert evaluate(EX, {"answer": 42}).passed
    wrong = evaluate(EX, {"answer": 41})
    assert not wrong.passed and wrong.message == "Ответ не тот: перечитайте условие."
    assert wrong.text.startswith("✗ 99.1 «Проба»")


def test_a_blank_cell_names_the_missing_variables_in_russian() -> None:
    verdict = evaluate(EX, {})
    assert not verdict.passed and "Переменная `answer` пока не определена" in verdict.message
    two = Exercise(id="99.2", title="t", needs=("a", "b"), setup=(), verify=_verify, hint="h")
    assert "Переменные `a`, `b` пока не определены" in evaluate(two, {}).message
    setup = Exercise(id="99.3", title="t", verify=_verify, hint="h")  # needs r and P from the first cell
    assert "первую ячейку" in evaluate(setup, {"answer": 42}).message


def test_an_unexpected_object_or_a_dead_redis_is_one_line_not_a_traceback() -> None:
    broken = evaluate(Exercise(id="99.4", title="t", needs=("answer",), setup=(), verify=_broken, hint="h"),
                      {"answer": 42})
    assert not broken.passed and broken.message.startswith("Проверка не смогла разобрать ваш результат (TypeError")
    down = evaluate(Exercise(id="99.5", title="t", setup=(), verify=_redis_down, hint="h"), {})
    assert not down.passed and down.message.startswith("Redis не отвечает")


def test_the_html_box_hides_the_hint_behind_a_click_and_escapes() -> None:
    sneaky = Exercise(id="99.6", title="<b>", needs=("answer",), setup=(), verify=_verify, hint="a < b")
    failed = evaluate(sneaky, {"answer": 0})._repr_html_()
    assert "<details" in failed and "<summary" in failed and "Подсказка" in failed and "a &lt; b" in failed
    assert "<code>answer</code>" in evaluate(sneaky, {})._repr_html_()  # `answer` as Markdown shows it
    assert "&lt;b&gt;" in failed and "data-passed='false'" in failed
    passed = evaluate(sneaky, {"answer": 42})._repr_html_()
    assert "<details" not in passed and "data-passed='true'" in passed


def test_check_reads_the_callers_globals_and_raises_one_rendered_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("labs.exercises.notebook.find", lambda exercise_id: EX)
    check("99.1", {"answer": 42})  # passes: returns nothing, raises nothing
    with pytest.raises(CheckFailed) as failed:
        check("99.1", {"answer": 1})
    (line,) = failed.value._render_traceback_()
    assert "Проверка 99.1 не пройдена" in line and "перечитайте условие" in str(failed.value)
    with pytest.raises(CheckFailed, match="пока не определена"):
        check("99.1")  # no namespace: the caller's globals, here this module's, which has no `answer`


def test_ids_are_validated_and_unknown_ones_say_what_exists() -> None:
    with pytest.raises(ValueError, match=r"NN\.K"):
        Exercise(id="2.4", title="t", verify=_verify, hint="h")
    with pytest.raises(ValueError, match="title and a hint"):
        Exercise(id="02.9", title="", verify=_verify, hint="h")
    with pytest.raises(KeyError, match=r"02\.3"):
        find("02.99")
    with pytest.raises(KeyError, match="nb77"):
        find("77.1")
    assert all(isinstance(e, Exercise) for n in range(1, 11) for e in exercises_of(f"{n:02d}"))
    hint("02.4")  # shows the hint outside a notebook without failing


def test_miss_is_what_verify_raises() -> None:
    with pytest.raises(Miss, match="нет"):
        expect(False, "нет")
    expect(True, "never shown")


def test_every_exercise_imports_its_check_in_its_own_cells() -> None:
    """An exercise runs right after the notebook's first cell (reset, a student starting at it, grading):
    so ``check`` is imported by that cell or by the exercise's own cells, not by an earlier exercise's."""
    import re
    from pathlib import Path

    import nbformat

    imports = re.compile(r"^from labs\.exercises(\.notebook)? import [^\n]*\bcheck\b", re.MULTILINE)
    missing = []
    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        code = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
        if code and imports.search(code[0].source):
            continue
        cells: dict[str, list[str]] = {}
        for cell in code:
            if exercise := cell.metadata.get("exercise"):
                cells.setdefault(exercise, []).append(cell.source)
        missing += [f"{path.stem}: {e}" for e, sources in cells.items() if not any(imports.search(s) for s in sources)]
    assert not missing, missing
