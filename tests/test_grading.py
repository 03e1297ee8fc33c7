"""The grading pipeline end to end: real submissions, nbgrader's autograde, each notebook in its own sandbox.

One class (``tests/grading_support.py``) is graded once for the module, three submissions at a
time; each test reads its gradebook lines. Solved: full points (lab 1 included); untouched:
zero with each check's Russian message; one wrong answer: only that exercise; each bad kind:
its exercise zero with the reason, the other exercises keep their points.
"""

from __future__ import annotations

import html
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grading_support
import pytest
from grading_support import GradedClass

from labs.grading import cgroup, gradebook, labs_checks, summary
from labs.grading.grader import Line, Result

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def graded() -> Iterator[GradedClass]:
    with tempfile.TemporaryDirectory(prefix="grading-test-") as tmp:
        yield grading_support.grade_class(Path(tmp))


def lines(result: Result, part: str = grading_support.NAME) -> dict[str, Line]:
    return {line.item: line for line in result.lines if line.part == part}


def test_a_solved_submission_gets_full_points_lab_included(graded: GradedClass) -> None:
    result = graded.results["solved"]
    notebook = lines(result)
    assert sorted(notebook) == ["05.1", "05.2", "05.3"]
    assert all(line.score == line.max_score == 1.0 and line.message.startswith("✓") for line in notebook.values())
    lab = lines(result, "lab1")
    assert len(lab) >= 8 and all(line.score == line.max_score > 0 for line in lab.values()), lab
    assert sum(line.score for line in lab.values()) == pytest.approx(labs_checks.LAB_POINTS)
    assert result.score == result.max_score


def test_an_untouched_submission_gets_zero_with_each_checks_message(graded: GradedClass) -> None:
    notebook = lines(graded.results["untouched"])
    assert [line.score for line in notebook.values()] == [0.0, 0.0, 0.0]
    for exercise, line in notebook.items():
        assert line.message.startswith(f"✗ {exercise} «") and "пока не определен" in line.message
        assert line.reason == line.message


def test_one_wrong_answer_loses_only_that_exercise(graded: GradedClass) -> None:
    notebook = lines(graded.results["wrong-lab-never-exits"])
    assert {k: v.score for k, v in notebook.items()} == {"05.1": 1.0, "05.2": 0.0, "05.3": 1.0}
    assert notebook["05.2"].reason.startswith("✗ 05.2")
    assert "пока не определен" not in notebook["05.2"].reason  # a wrong value, not a blank: the check says what


@pytest.mark.parametrize(
    ("student", "first", "second"),
    [
        ("hang-raise", "CellTimeoutError: ячейка не закончилась за 30 с", "RuntimeError: the student's own bug"),
        ("flushall-shutdown", "run the 'flushall' command (в песочнице", "run the 'shutdown' command (в песочнице"),
        ("segfault-kernel-death", "DEBUG command not allowed", "DeadKernelError: ядро Python умерло"),
        ("deleted-edited", "удалена ячейка проверки (check-05_1", "изменена ячейка проверки (check-05_2"),
    ],
)
def test_each_bad_kind_zeroes_its_exercise_with_the_reason_and_the_rest_is_graded(
    graded: GradedClass, student: str, first: str, second: str
) -> None:
    notebook = lines(graded.results[student])
    assert {k: v.score for k, v in notebook.items()} == {"05.1": 0.0, "05.2": 0.0, "05.3": 1.0}, notebook
    assert first in notebook["05.1"].reason
    assert second in notebook["05.2"].reason
    assert notebook["05.3"].message.startswith("✓ 05.3")


def test_an_invalid_notebook_gets_zero_and_the_lab_is_still_graded(graded: GradedClass) -> None:
    result = graded.results["invalid-json"]
    notebook = lines(result)
    assert all(line.score == 0.0 and "не JSON" in line.reason for line in notebook.values())
    assert all(line.score == line.max_score > 0 for line in lines(result, "lab1").values())
    assert not result.feedback


def test_a_lab_that_never_exits_is_killed_and_the_notebook_is_still_graded(graded: GradedClass) -> None:
    result = graded.results["wrong-lab-never-exits"]
    assert {k: v.score for k, v in lines(result).items()} == {"05.1": 1.0, "05.2": 0.0, "05.3": 1.0}
    (lab,) = lines(result, "lab1").values()
    assert lab.score == 0.0 and lab.max_score == labs_checks.LAB_POINTS and "не закончилась за 30 с" in lab.reason
    assert result.walls["lab1"] < grading_support.LIMITS.lab_timeout_s + 20  # stopped at its limit


def test_nothing_outlives_its_sandbox(graded: GradedClass) -> None:
    assert graded.setup.uids is not None
    leftover = [entry.name for entry in Path("/proc").iterdir()
                if entry.name.isdigit() and _uid(entry) in graded.setup.uids.uids]
    assert not leftover, f"processes of the sandboxes' uids left: {leftover}"
    layout = cgroup.available()
    if layout is not None:
        prefixes = tuple(f"uid{uid}-" for uid in graded.setup.uids.uids)
        mine = [path.name for path in layout.memory.iterdir() if path.name.startswith(prefixes)]
        assert not mine, f"cgroups left: {mine}"


def _uid(entry: Path) -> int | None:
    try:
        return entry.stat().st_uid
    except OSError:
        return None


def test_feedback_pages_carry_the_scores_and_the_russian_messages(graded: GradedClass) -> None:
    (page,) = graded.results["wrong-lab-never-exits"].feedback
    text = page.read_text(encoding="utf-8")
    assert "(Score: 2.0 / 3.0)" in text
    message = lines(graded.results["wrong-lab-never-exits"])["05.2"].message
    verdict = message.split("»: ", 1)[1].split("`", 1)[0]  # the check's own words, up to the first code span
    assert "05.2 «Пачка целиком и на одну больше»" in text and html.escape(verdict, quote=False) in text, verdict
    (kernel_page,) = graded.results["segfault-kernel-death"].feedback
    assert "Оценка: 0. Причина: ячейка решения: DeadKernelError" in kernel_page.read_text(encoding="utf-8")


def test_gradebook_and_summary_rank_the_most_failed_exercise_first(graded: GradedClass, tmp_path: Path) -> None:
    results = list(graded.results.values())
    paths = gradebook.write_gradebook(results, tmp_path)
    students = paths["students"].read_text(encoding="utf-8").splitlines()
    assert students[0].startswith("student,score,max_score") and len(students) == 1 + len(results)
    stats = gradebook.item_stats(results)
    assert (stats[0].part, stats[0].item) == (grading_support.NAME, "05.2")  # spoiled in most submissions
    page = summary.write_summary(results, tmp_path).read_text(encoding="utf-8")
    assert page.index("05.2") < page.index("05.3") and "пока не определен" in page


def test_a_feedback_page_renders_in_chromium_with_the_message_visible(graded: GradedClass) -> None:
    import browser_support
    from require_support import skip_area

    if reason := browser_support.chromium_skip_reason():
        skip_area("browser", reason)
    (page_path,) = graded.results["segfault-kernel-death"].feedback
    shot = browser_support.screens_dir() / "grading-feedback.png"
    with tempfile.TemporaryDirectory(prefix="grading-chromium-") as profile, \
            browser_support.chromium_context(Path(profile)) as context:
        page = context.new_page()
        page.goto(page_path.as_uri())
        assert page.get_by_text("(Score: 1.0 / 3.0)").first.is_visible()
        reason = page.get_by_text("Причина: ячейка решения: DeadKernelError").first
        reason.scroll_into_view_if_needed()
        assert reason.is_visible()
        page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
