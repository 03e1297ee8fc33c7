"""The student edition as a student sees it: JupyterLab in headless Chromium, a blank, its check, the fix.

``make student``'s notebook 02 is served by JupyterLab with the repository's settings (as
``make jupyter`` starts it). The test runs the setup cell, then the exercise cells of 02.3
and 02.4 as one selection (the way Run All runs them): each check on a blank shows a red box
saying in Russian what is missing, with the hint behind a click, and the cells after a failed
check still run (the ``raises-exception`` tag). Then it types the reference solution into the
02.4 cell and runs it with its check: the box turns green. JupyterLab's "get notified about
Jupyter news?" prompt never shows. Screenshots are kept (paths printed).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_support
import nbformat
import pytest

from labs.exercises import edition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NOTEBOOK = "02_consumer_groups.ipynb"
NEWS_PROMPT = "Jupyter news"
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
BOXES_JS = """
() => Array.from(document.querySelectorAll('.exercise-check')).map(el => ({
  id: el.dataset.exercise, passed: el.dataset.passed === 'true', text: el.innerText }))
"""


@pytest.fixture(scope="module")
def work_dir() -> Iterator[Path]:
    if reason := browser_support.chromium_skip_reason():
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="browser-student-") as tmp:
        yield Path(tmp)


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


def test_a_blank_fails_its_check_in_russian_and_the_solution_passes(
    work_dir: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    student = work_dir / "student"
    edition.write_edition(edition.SOURCE_DIR, student)
    nb = nbformat.read(student / NOTEBOOK, as_version=4)
    reference = nbformat.read(edition.SOURCE_DIR / NOTEBOOK, as_version=4)
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    exercise = [i for i, c in enumerate(nb.cells) if c.metadata.get("exercise")]
    blank = next(i for i in exercise if nb.cells[i].metadata["exercise"] == "02.4" and "ваш код" in nb.cells[i].source)
    solution = next(c.source for c in reference.cells if c.id == nb.cells[blank].id)
    screens = browser_support.screens_dir()
    server = browser_support.start_jupyter(work_dir, source=student)
    try:
        with browser_support.chromium_context(work_dir / "profile") as context:
            page = context.new_page()
            browser_support._open_notebook(page, server, NOTEBOOK, timeout_s=60)
            page.evaluate(RUN_RANGE_JS, {"from": setup, "to": setup})
            _wait_ran(page, [setup])
            page.evaluate(RUN_RANGE_JS, {"from": exercise[0], "to": exercise[-1]})
            cells = _wait_ran(page, exercise)  # every cell ran: a failed check did not stop the selection
            checks = [i for i in exercise if edition.check_ids(nb.cells[i].source)]
            assert all(cells[i]["errors"] and "CheckFailed" in cells[i]["errors"][0] for i in checks), cells
            assert all(not cells[i]["errors"] for i in exercise if i not in checks)
            boxes = page.evaluate(BOXES_JS)
            assert [(b["id"], b["passed"]) for b in boxes] == [("02.3", False), ("02.4", False)]
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
            assert [(b["id"], b["passed"]) for b in boxes] == [("02.3", False), ("02.4", True)], boxes
            assert "верно" in boxes[1]["text"]
            page.locator(".exercise-check[data-exercise='02.4']").scroll_into_view_if_needed()
            page.screenshot(path=str(screens / "student-02-solution-passes.png"))
            assert page.get_by_text(NEWS_PROMPT).count() == 0, "JupyterLab asked about Jupyter news"
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    finally:
        server.stop()
    with capsys.disabled():
        print("\nstudent edition screenshots:", *sorted(screens.glob("student-02-*.png")), sep="\n  ")
    assert json.loads((student / NOTEBOOK).read_text())["metadata"]["student_edition"] is True
