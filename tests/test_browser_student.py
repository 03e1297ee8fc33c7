"""The second half of the browser student paths: 03, 08, 09 and 10 (``test_browser.SECOND_HALF``).

``tests/test_browser.py`` holds the walk, its fixtures and every path, and walks the first part itself; this
file only gives these paths a file of their own, so that ``--dist loadfile`` walks them on another worker with
its own JupyterLab (the eight walks in one file took about 12 minutes under load).
"""

from __future__ import annotations

import test_browser
from test_browser import browser, chromium, lab, screens, student_edition, work_dir  # noqa: F401 (fixtures)

pytestmark = test_browser.pytestmark

test_the_student_path_second_half = test_browser.student_path_test(test_browser.SECOND_HALF)
