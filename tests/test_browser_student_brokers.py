"""The third part of the browser student paths: 11 and 04 (``test_browser.THIRD_PART``), on a worker of
their own (11's Run All starts RabbitMQ and NATS: about 4 minutes under load). See ``test_browser_student.py``.
"""

from __future__ import annotations

import test_browser
from test_browser import browser, chromium, lab, screens, student_edition, work_dir  # noqa: F401 (fixtures)

pytestmark = test_browser.pytestmark

test_the_student_path_third_part = test_browser.student_path_test(test_browser.THIRD_PART)
