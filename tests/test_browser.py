"""Notebooks 02 and 04 in JupyterLab in headless Chromium, with Run All: what nbval cannot see.

nbval runs the cells, but never renders a widget. Here a real JupyterLab renders them in
Debian's Chromium (driven by Playwright, see ``tests/browser_support.py``), and the test
checks what a student would see: the live panel is drawn at the notebook's full width, its
numbers change while the work runs, the page logs no console error, and every cell
finishes without an error output. Screenshots are saved to a temporary directory and their
paths printed. Without Chromium (or Playwright) the test is skipped with the reason.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_support
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

NOTEBOOKS = ["02_consumer_groups.ipynb", "04_lab1.ipynb"]
RUN_ALL_TIMEOUT_S = 100.0
# Console errors that say nothing about the notebooks. Each is a substring, with why it is harmless.
HARMLESS_CONSOLE_ERRORS: dict[str, str] = {}


@pytest.fixture(scope="module")
def chromium() -> None:
    if reason := browser_support.chromium_skip_reason():
        pytest.skip(reason)


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
