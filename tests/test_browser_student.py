"""The second half of the browser student paths: 03, 08, 09 and 10 (``test_browser.SECOND_HALF``).

11 and 04 are in ``tests/test_browser_student_brokers.py``.

``tests/test_browser.py`` holds the walk, its fixtures and every path, and walks the first half itself;
this file only gives the other half a file of its own, so that ``--dist loadfile`` runs it on another
worker with its own JupyterLab (the eight walks in one file took about 12 minutes under load).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import browser_support
import pytest
import test_browser
from test_browser import (  # noqa: F401 (module fixtures, imported to be this module's own)
    browser,
    chromium,
    lab,
    screens,
    student_edition,
    work_dir,
)

pytestmark = test_browser.pytestmark


@pytest.mark.parametrize("path", test_browser.student_path_params(test_browser.SECOND_HALF, inside=True))
def test_the_student_path_second_half(
    path: test_browser.StudentPath,
    lab: browser_support.JupyterServer,  # noqa: F811 (the fixture imported above)
    browser: Any,  # noqa: F811
    student_edition: Path,  # noqa: F811
    screens: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same walk as ``test_browser.test_the_student_path_run_all_fill_fail_retry_and_reload``."""
    test_browser.test_the_student_path_run_all_fill_fail_retry_and_reload(
        path, lab, browser, student_edition, screens, capsys)
