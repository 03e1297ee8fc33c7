"""Notebook 07 in JupyterLab in headless Chromium, Run All: the live metrics dashboard as a student sees it.

nbval runs the cells but never renders a widget. Here JupyterLab renders notebook 07 in
Debian's Chromium (the server and browser helpers of ``tests/browser_support.py``), and the
test checks what the issue asks for: the dashboard is drawn at the notebook's full width,
its status line changes while the worker runs, it stops by itself once the worker is idle,
no cell fails and the page logs no console error. Screenshots go to ``BROWSER_TEST_SCREENS``
(or a temporary directory) and their paths are printed. Without Chromium or Playwright the
test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_support
import pytest
from require_support import skip_area

from labs.polling import poll_value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

NOTEBOOK = "07_shutdown_and_observability.ipynb"
BOARD = ".metrics-dashboard"
STATUS = ".metrics-dashboard-status"
RUN_ALL_TIMEOUT_S = 150.0
# Every text the status line takes, recorded on each DOM change (a loaded browser applies
# queued widget updates in bursts, and polling would miss them).
RECORD_JS = browser_support.record_statuses_js(STATUS, "__boardStatuses")


@pytest.fixture(scope="module")
def screens() -> Path:
    return browser_support.screens_dir()


@pytest.fixture(scope="module")
def browser_page(redis_url: str) -> Iterator[tuple[Any, list[str]]]:
    """Notebook 07 open in JupyterLab, kernel idle; plus the page's console errors as they come."""
    if reason := browser_support.chromium_skip_reason():
        skip_area("browser", reason)
    assert os.environ.get("REDIS_URL") == redis_url  # the kernel inherits the session's Redis
    with tempfile.TemporaryDirectory(prefix="browser-dashboard-") as tmp:
        server = browser_support.start_jupyter(Path(tmp))
        try:
            with browser_support.chromium_context(Path(tmp) / "profile") as context:
                page = context.new_page()
                console: list[str] = []
                page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda exc: console.append(f"uncaught: {exc}"))
                browser_support._open_notebook(page, server, NOTEBOOK, timeout_s=60)
                yield page, console
                with contextlib.suppress(Exception):
                    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        finally:
            server.stop()


def _run_all(page: Any, screens: Path) -> tuple[dict[str, Any] | None, list[str], list[Path]]:
    page.evaluate(RECORD_JS)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    shots: list[Path] = []

    def read() -> dict[str, Any] | None:
        state: dict[str, Any] | None = page.evaluate(browser_support.NOTEBOOK_STATE_JS)
        statuses = page.evaluate("() => window.__boardStatuses.slice()")
        if not shots and _processed(statuses) > 0:  # while the worker runs, for the live screenshot
            with contextlib.suppress(Exception):  # re-rendered mid-shot: the final shot still comes
                page.locator(BOARD).first.screenshot(path=str(screens / "07-dashboard-live.png"), timeout=5000)
                shots.append(screens / "07-dashboard-live.png")
        return state

    state = poll_value(read, browser_support._done, RUN_ALL_TIMEOUT_S, poll_s=0.1)
    return state, page.evaluate("() => window.__boardStatuses.slice()"), shots


def _processed(statuses: list[str]) -> int:
    """The worker's ``processed`` in the last live status (0 if none yet)."""
    live = [t for t in statuses if "идёт:" in t]
    match = re.search(r"processed (\d+)", live[-1]) if live else None
    return int(match.group(1)) if match else 0


def _live(statuses: list[str]) -> list[str]:
    """Distinct live figures (the text after 'идёт:' without its clock)."""
    seen: list[str] = []
    for text in statuses:
        if "идёт:" in text:
            figures = text.split("идёт:", 1)[1].rsplit("· t=", 1)[0].strip()
            if figures not in seen:
                seen.append(figures)
    return seen


def test_dashboard_updates_live_and_stops_by_itself(
    browser_page: tuple[Any, list[str]], screens: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, console = browser_page
    state, statuses, shots = _run_all(page, screens)
    assert browser_support._done(state), f"Run All did not finish in {RUN_ALL_TIMEOUT_S:g} s"
    assert state is not None
    errors = [f"cell {c['index']}: {e}" for c in state["cells"] for e in c["errors"]]
    assert not errors, errors
    board = page.locator(BOARD).first
    board.scroll_into_view_if_needed()
    board.screenshot(path=str(screens / "07-dashboard-final.png"))
    shots.append(screens / "07-dashboard-final.png")
    with capsys.disabled():
        print("\nnotebook 07 screenshots:", *shots, sep="\n  ")
    plot = page.locator(f"{BOARD} .js-plotly-plot").first.bounding_box()
    area = page.locator(".jp-OutputArea-output", has=page.locator(BOARD)).first.bounding_box()
    assert plot and area and plot["width"] >= 0.95 * area["width"], (plot, area)  # full width
    assert len(_live(statuses)) >= 2, f"never seen changing while live: {statuses}"
    final = page.locator(STATUS).first.inner_text()
    assert "остановлен" in final and "прогон закончен" in final, final  # stopped by itself, when idle
    assert not console, console
