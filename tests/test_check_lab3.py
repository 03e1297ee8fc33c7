"""``make check-lab-3``: the reference passes, an ack-first worker fails and names the lost events.

Both run only the ``normal`` mode with the ``sqlite`` strategy (about 20 s each): a worker that
acks before it works loses every failed attempt there already. The quick lab in
``tests/test_lab3.py`` covers the reference in every mode.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from labs.lab3 import check

BROKEN = Path(__file__).with_name("lab3_ackfirst_worker.py")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_reference_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = check.main(["--modes", "normal", "--reports-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL" not in out and "PASS" in out


def test_ack_first_worker_fails_naming_the_lost_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    worker = shlex.join([sys.executable, str(BROKEN)])
    code = check.main(["--worker", worker, "--modes", "normal", "--reports-dir", str(tmp_path)])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1, out
    assert "FAIL normal: every 7th attempt failed" in out
    assert "acked without doing the work" in out
    assert re.search(r"\d+ lost, e\.g\. [0-9a-f]{32}", out), out
