"""Notebooks 02 and 04 in JupyterLab in headless Chromium, with Run All: what nbval cannot see; and the student edition.

nbval runs the cells, but never renders a widget. Here a real JupyterLab renders them in
Debian's Chromium (driven by Playwright, see ``tests/browser_support.py``), and the test
checks what a student would see: the live panel is drawn at the notebook's full width, its
numbers change while the work runs, the page logs no console error, and every cell
finishes without an error output. Screenshots are saved to a temporary directory and their
paths printed. Without Chromium (or Playwright) the test is skipped with the reason.

The student edition (``make student``) is served by the same JupyterLab, under ``student/``,
and notebook 02 is walked the way a student walks it: Run All reaches the end (each check on a
blank shows a red box, the hint's first step behind a click, the clean-up keeps Redis up); the
reference solution typed into 02.4 turns its box green; a wrong attempt (claimed, not acked)
turns it red with the way back (``reset("02.4")``); the right code again on the used-up state
gets one Russian line from Redis, not a traceback; the preparing cell, the solution and the
check then turn it green again; and after a page reload the live panel is drawn whole again
from the kernel's widget state (every point, the same axis ranges). JupyterLab's "get notified
about Jupyter news?" prompt never shows (the settings shipped in ``jupyter/``).
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

# 02 runs whole in its student edition in the student-path test below (Run All, the panel, a reload),
# so the reference Run All covers 04 only: one JupyterLab run of 02 instead of two keeps the suite's time.
NOTEBOOKS = ["04_lab1.ipynb"]
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


WRONG_02_4 = """# 02.4, a first try: claimed, but not acknowledged
_, claimed, _ = r.xautoclaim(rescue_stream, "billing", "rescuer", min_idle_time=100)
rescued = [msg_id for msg_id, _ in claimed]
"""
PLOT_DATA_JS = """
(selector) => {
  const plot = document.querySelector(selector);
  if (!plot || !plot.data || !plot._fullLayout) return null;
  const points = plot.data.map(t => (t.x || []).length);
  const top = (axis) => {
    const range = plot._fullLayout[axis] && plot._fullLayout[axis].range;
    return range ? range[1] : null;
  };
  return {points, yaxis: top('yaxis'), xaxis: top('xaxis'),
          titles: (plot._fullLayout.annotations || []).map(a => a.text)};
}
"""


def _wait_all_ran(page: Any, timeout_s: float) -> dict[int, dict[str, Any]]:
    """Run All in the student edition: wait until every code cell has run (a failed check does not stop it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = page.evaluate(browser_support.NOTEBOOK_STATE_JS)
        if state and state["kernel"] == "idle" and all(c["count"] is not None for c in state["cells"]):
            return {c["index"]: c for c in state["cells"]}
        time.sleep(0.3)
    raise AssertionError(f"Run All did not reach the end in {timeout_s:g} s: {_state(page)}")


def _boxes(page: Any) -> dict[str, list[bool]]:
    found: dict[str, list[bool]] = {}
    for box in page.evaluate(BOXES_JS):
        found.setdefault(box["id"], []).append(box["passed"])
    return found


def _run_cells(page: Any, first: int, last: int, before: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    page.evaluate(RUN_RANGE_JS, {"from": first, "to": last})
    return _wait_ran(page, list(range(first, last + 1)), before=before)


def _shoot(page: Any, screens: Path, name: str, locator: str) -> Path:
    target = page.locator(locator).last
    target.scroll_into_view_if_needed()
    path = screens / name
    page.screenshot(path=str(path))
    return path


def test_the_student_path_run_all_fill_fail_retry_and_reload(
    lab: browser_support.JupyterServer, browser: Any, screens: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make student``'s notebook 02 the way a student goes through it (see the module docstring)."""
    student = lab.root_dir / "student"  # the server serves what is written under its root, even now
    edition.write_edition(edition.SOURCE_DIR, student)
    nb = nbformat.read(student / STUDENT_NOTEBOOK, as_version=4)
    reference = nbformat.read(edition.SOURCE_DIR / STUDENT_NOTEBOOK, as_version=4)
    exercise = [i for i, c in enumerate(nb.cells) if c.metadata.get("exercise")]
    checks = [i for i in exercise if edition.check_ids(nb.cells[i].source)]
    blank = next(i for i in exercise if nb.cells[i].metadata["exercise"] == "02.4" and "ваш код" in nb.cells[i].source)
    solution = next(c.source for c in reference.cells if c.id == nb.cells[blank].id)
    cleanup = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    shots: list[Path] = []
    page = browser.new_page()
    box_24 = ".exercise-check[data-exercise='02.4']"
    try:
        browser_support._open_notebook(page, lab, f"student/{STUDENT_NOTEBOOK}", timeout_s=60)
        # 1. Run All reaches the end: the blank checks are red, nothing else failed, Redis is still up.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        cells = _wait_all_ran(page, RUN_ALL_TIMEOUT_S)
        assert all(cells[i]["errors"] and "CheckFailed" in cells[i]["errors"][0] for i in checks), cells
        others = [f"cell {i}: {c['errors']}" for i, c in cells.items() if c["errors"] and i not in checks]
        assert not others, others
        assert _boxes(page) == {e: [False] for e in EXERCISES_02}
        cleanup_text = page.locator(".jp-Cell").nth(cleanup).inner_text()
        assert "оставлены для заданий" in cleanup_text, cleanup_text
        hint = page.locator(f"{box_24} summary").first
        hint.scroll_into_view_if_needed()
        hint.click()
        nudge = page.locator(f"{box_24} details.exercise-hint").inner_text()
        assert "Ещё подсказка" in nudge and "XACK" not in nudge  # the second step is one more click away
        shots.append(_shoot(page, screens, "student-02-1-run-all.png", box_24))
        # 2. The student fills 02.4 and runs it with its check (the preparing cell above ran in Run All).
        page.evaluate(SET_SOURCE_JS, {"index": blank, "source": solution})
        cells = _run_cells(page, blank, blank + 1, cells)
        assert not cells[blank]["errors"] and not cells[blank + 1]["errors"], cells[blank + 1]
        assert _boxes(page)["02.4"] == [True]
        shots.append(_shoot(page, screens, "student-02-2-right.png", box_24))
        # 3. A wrong attempt (claimed, not acked) on the state the right one used up: red, with the way back.
        page.evaluate(SET_SOURCE_JS, {"index": blank, "source": WRONG_02_4})
        cells = _run_cells(page, blank, blank + 1, cells)
        assert cells[blank + 1]["errors"] and _boxes(page)["02.4"] == [False]
        retry = page.locator(f"{box_24} .exercise-retry").inner_text()
        assert 'reset("02.4")' in retry and "ячейку над вашим решением" in retry, retry
        # ... and the right code again without re-preparing: one Russian line from Redis, not a traceback wall.
        page.evaluate(SET_SOURCE_JS, {"index": blank, "source": solution})
        cells = _run_cells(page, blank, blank + 1, cells)
        assert len(cells[blank]["errors"]) == 1, cells[blank]
        output = page.locator(".jp-Cell").nth(blank).locator(".jp-OutputArea-output").inner_text()
        assert "Redis ответил ошибкой" in output and "Traceback" not in output and len(output.splitlines()) <= 3, output
        assert 'reset("02.4")' in output, output  # the kernel knew the cell's exercise from JupyterLab's cellId
        page.locator(".jp-Cell").nth(blank).scroll_into_view_if_needed()
        shots.append(screens / "student-02-3-wrong-and-again.png")
        page.screenshot(path=str(shots[-1]))
        # 4. The retry path: the preparing cell again, the solution, the check: green.
        cells = _run_cells(page, blank - 1, blank + 1, cells)
        assert not any(cells[i]["errors"] for i in (blank - 1, blank, blank + 1)), cells
        assert _boxes(page)["02.4"] == [True]
        shots.append(_shoot(page, screens, "student-02-4-retry-green.png", box_24))
        # 5. A page reload: the panel comes back whole, from the kernel's widget state.
        before = page.evaluate(PLOT_DATA_JS, browser_support.PANEL_PLOT)
        assert before and max(before["points"]) > 5, before
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=20000)
        page.reload(wait_until="domcontentloaded")
        page.wait_for_function(f"(s) => {{ const d = ({PLOT_DATA_JS})(s); return d && Math.max(...d.points) > 0; }}",
                               arg=browser_support.PANEL_PLOT, timeout=60000, polling=300)
        after = page.evaluate(PLOT_DATA_JS, browser_support.PANEL_PLOT)
        assert after["points"] == before["points"], (before, after)  # every line, every point
        assert after["yaxis"] == pytest.approx(before["yaxis"]) and after["xaxis"] == pytest.approx(before["xaxis"])
        assert len(after["titles"]) >= 3, after  # the three charts' titles, apart
        panel = page.locator(browser_support.PANEL).first
        panel.scroll_into_view_if_needed()
        shot = screens / "student-02-5-panel-after-reload.png"
        panel.screenshot(path=str(shot))
        shots.append(shot)
        assert page.get_by_text(NEWS_PROMPT).count() == 0, "JupyterLab asked about Jupyter news"
    finally:
        with contextlib.suppress(Exception):
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        page.close()
    with capsys.disabled():
        print("\nstudent path screenshots:", *shots, sep="\n  ")
