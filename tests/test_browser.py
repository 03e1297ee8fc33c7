"""Notebooks 02 and 04 in JupyterLab in headless Chromium, with Run All: what nbval cannot see; and the student edition.

nbval runs the cells, but never renders a widget. Here a real JupyterLab renders them in
Debian's Chromium (driven by Playwright, see ``tests/browser_support.py``), and the test
checks what a student would see: the live panel is drawn at the notebook's full width, its
numbers change while the work runs, the page logs no console error, and every cell
finishes without an error output. Screenshots are saved to a temporary directory and their
paths printed. Without Chromium (or Playwright) the test is skipped with the reason.

The student edition (``make student``) is served by the same JupyterLab, under ``student/``:
the test runs the setup cell of notebook 02, then the exercise cells of 02.1 to 02.4 as one
selection (the way Run All runs them): each check on a blank shows a red box saying in Russian
what is missing, with the hint behind a click, and the cells after a failed check still run
(the ``raises-exception`` tag). Then it types the reference solution into the 02.4 cell and
runs it with its check: the box turns green. JupyterLab's "get notified about Jupyter news?"
prompt never shows (the settings shipped in ``jupyter/``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_support
import nbformat
import pytest
from require_support import skip_area

from labs.exercises import edition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

NOTEBOOKS = ["02_consumer_groups.ipynb", "04_lab1.ipynb"]
STUDENT_NOTEBOOK = "02_consumer_groups.ipynb"
NEWS_PROMPT = "Jupyter news"
RUN_ALL_TIMEOUT_S = 100.0
# Console errors that say nothing about the notebooks. Each is a substring, with why it is harmless.
HARMLESS_CONSOLE_ERRORS: dict[str, str] = {}


@pytest.fixture(scope="module")
def chromium() -> None:
    if reason := browser_support.chromium_skip_reason():
        skip_area("browser", reason)


@pytest.fixture(scope="module")
def work_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="browser-test-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="module")
def screens() -> Path:
    """Kept after the run, so that a person can look at them."""
    return browser_support.screens_dir()


@pytest.fixture(scope="module")
def lab(chromium: None, redis_url: str, work_dir: Path) -> Iterator[browser_support.JupyterServer]:
    """JupyterLab over a copy of notebooks/; kernels inherit REDIS_URL and the LAB_* ports."""
    assert os.environ.get("REDIS_URL") == redis_url
    server = browser_support.start_jupyter(work_dir)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(lab: browser_support.JupyterServer, work_dir: Path) -> Iterator[Any]:
    with browser_support.chromium_context(work_dir / "chromium-profile") as context:
        yield context


def _unexplained(errors: list[str]) -> list[str]:
    return [e for e in errors if not any(known in e for known in HARMLESS_CONSOLE_ERRORS)]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_run_all_in_jupyterlab(
    notebook: str,
    lab: browser_support.JupyterServer,
    browser: Any,
    screens: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = browser_support.run_all(browser, lab, notebook, screens, timeout_s=RUN_ALL_TIMEOUT_S)
    with capsys.disabled():
        print(f"\n{notebook}: Run All took {report.seconds:.1f} s; screenshots:", *report.screenshots, sep="\n  ")
    assert report.finished, f"Run All did not finish in {RUN_ALL_TIMEOUT_S:g} s; cells not run: {report.unexecuted}"
    assert not report.cell_errors, report.cell_errors
    assert not report.unexecuted, f"cells that never ran: {report.unexecuted}"
    assert not _unexplained(report.console_errors), report.console_errors
    # The panel rendered: plotly drew it, at the output area's full width.
    assert report.panel_width_px > 0, "the panel's plotly figure never appeared"
    assert report.panel_width_px >= 0.95 * report.output_width_px, (report.panel_width_px, report.output_width_px)
    # Its numbers changed while the work ran: the live status line showed at least two texts.
    running = report.running_statuses()
    assert len(running) >= 2, f"the panel was never seen changing while live: {report.statuses}"
    # A short run can be watched again: the replay button redraws the recorded samples.
    assert len(report.replay_statuses) >= 2, f"the replay button did not replay: {report.replay_statuses}"


RUN_RANGE_JS = """
(args) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const nb = panel.content;
  nb.activeCellIndex = args.from;
  nb.deselectAll();
  nb.extendContiguousSelectionTo(args.to);
  return window.jupyterapp.commands.execute('notebook:run-cell');
}
"""
SET_SOURCE_JS = """
(args) => {
  window.jupyterapp.shell.currentWidget.content.model.cells.get(args.index).sharedModel.setSource(args.source);
}
"""
EXERCISES_02 = ("02.1", "02.2", "02.3", "02.4")
BOXES_JS = """
() => Array.from(document.querySelectorAll('.exercise-check')).map(el => ({
  id: el.dataset.exercise, passed: el.dataset.passed === 'true', text: el.innerText }))
"""


def _state(page: Any) -> dict[int, dict[str, Any]]:
    return {c["index"]: c for c in page.evaluate(browser_support.NOTEBOOK_STATE_JS)["cells"]}


def _wait_ran(
    page: Any, indexes: list[int], timeout_s: float = 60.0, before: dict[int, dict[str, Any]] | None = None
) -> dict[int, dict[str, Any]]:
    """Wait until each cell of ``indexes`` has run (again, when ``before`` gives its earlier count)."""
    old = {i: (before or {}).get(i, {}).get("count") for i in indexes}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = page.evaluate(browser_support.NOTEBOOK_STATE_JS)
        cells = {c["index"]: c for c in state["cells"]}
        if state["kernel"] == "idle" and all(cells[i]["count"] not in (None, old[i]) for i in indexes):
            return cells
        time.sleep(0.2)
    raise AssertionError(f"cells {indexes} did not all run in {timeout_s:g} s: {_state(page)}")


def test_the_student_edition_answers_back(
    lab: browser_support.JupyterServer, browser: Any, screens: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make student``'s notebook 02 on the same server: a blank, its check, the fix (see the module docstring)."""
    student = lab.root_dir / "student"  # the server serves what is written under its root, even now
    edition.write_edition(edition.SOURCE_DIR, student)
    nb = nbformat.read(student / STUDENT_NOTEBOOK, as_version=4)
    reference = nbformat.read(edition.SOURCE_DIR / STUDENT_NOTEBOOK, as_version=4)
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    exercise = [i for i, c in enumerate(nb.cells) if c.metadata.get("exercise")]
    blank = next(i for i in exercise if nb.cells[i].metadata["exercise"] == "02.4" and "ваш код" in nb.cells[i].source)
    solution = next(c.source for c in reference.cells if c.id == nb.cells[blank].id)
    page = browser.new_page()
    try:
        browser_support._open_notebook(page, lab, f"student/{STUDENT_NOTEBOOK}", timeout_s=60)
        page.evaluate(RUN_RANGE_JS, {"from": setup, "to": setup})
        _wait_ran(page, [setup])
        page.evaluate(RUN_RANGE_JS, {"from": exercise[0], "to": exercise[-1]})
        cells = _wait_ran(page, exercise)  # every cell ran: a failed check did not stop the selection
        checks = [i for i in exercise if edition.check_ids(nb.cells[i].source)]
        assert all(cells[i]["errors"] and "CheckFailed" in cells[i]["errors"][0] for i in checks), cells
        assert all(not cells[i]["errors"] for i in exercise if i not in checks)
        boxes = page.evaluate(BOXES_JS)
        assert [(b["id"], b["passed"]) for b in boxes] == [(e, False) for e in EXERCISES_02]
        assert all("пока не определен" in b["text"] and "Подсказка" in b["text"] for b in boxes)
        hint = page.locator(".exercise-check[data-exercise='02.4'] summary")
        hint.scroll_into_view_if_needed()
        hint.click()
        assert "xautoclaim" in page.locator(".exercise-check[data-exercise='02.4'] details").inner_text()
        page.screenshot(path=str(screens / "student-02-blank-checks.png"))
        page.evaluate(SET_SOURCE_JS, {"index": blank, "source": solution})
        page.evaluate(RUN_RANGE_JS, {"from": blank - 1, "to": blank + 1})  # prepare, solution, check
        cells = _wait_ran(page, [blank - 1, blank, blank + 1], before=cells)
        assert not cells[blank + 1]["errors"], cells[blank + 1]
        boxes = page.evaluate(BOXES_JS)
        assert [(b["id"], b["passed"]) for b in boxes] == [(e, e == "02.4") for e in EXERCISES_02], boxes
        assert "верно" in boxes[-1]["text"]
        page.locator(".exercise-check[data-exercise='02.4']").scroll_into_view_if_needed()
        page.screenshot(path=str(screens / "student-02-solution-passes.png"))
        assert page.get_by_text(NEWS_PROMPT).count() == 0, "JupyterLab asked about Jupyter news"
    finally:
        with contextlib.suppress(Exception):
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        page.close()
    with capsys.disabled():
        print("\nstudent edition screenshots:", *sorted(screens.glob("student-02-*.png")), sep="\n  ")
