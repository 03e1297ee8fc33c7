"""labs.lab3.scenario: a worker that dies at start is named with the last lines of its own output."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from labs.lab3.contract import spawn
from labs.lab3.scenario import dead_at_start, log_tail

pytestmark = pytest.mark.timeout(30)

NO_REDIS = (
    "import sys; print('billing worker starting'); "
    "sys.stderr.write('Traceback (most recent call last):\\n  File \"my_worker.py\", line 3\\n'"
    " + \"ModuleNotFoundError: No module named 'redis'\\n\"); sys.exit(1)"
)


@dataclass
class StartedCell:
    """What ``dead_at_start`` reads of a lab cell: its worker processes and their output files."""

    home: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def worker_log(self, consumer: str) -> Path:
        return self.home / f"{consumer}.log"


def test_a_worker_without_redis_shows_its_import_error_in_the_fail_line(tmp_path: Path) -> None:
    cell = StartedCell(tmp_path)
    cell.workers["billing-1"] = spawn([sys.executable, "-c", NO_REDIS], cell.worker_log("billing-1"))
    sleeper = [sys.executable, "-c", "import time; time.sleep(20)"]
    cell.workers["billing-2"] = spawn(sleeper, cell.worker_log("billing-2"))
    try:
        cell.workers["billing-1"].wait(timeout=20)
        (line,) = dead_at_start(cell)
    finally:
        cell.workers["billing-2"].kill()
        cell.workers["billing-2"].wait()
    assert line.startswith("billing-1 exited at start (exit code 1): ")
    assert "ModuleNotFoundError: No module named 'redis'" in line and "billing worker starting" in line
    assert "\n" not in line  # one FAIL line


def test_the_tail_is_short_and_says_so_when_there_is_nothing(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    assert log_tail(log) == "no output"
    log.write_text("\n".join(f"line {i}" for i in range(50)) + "\n")
    assert log_tail(log) == " | ".join(f"line {i}" for i in range(45, 50))
    log.write_text("x" * 2000)
    assert len(log_tail(log)) <= 403 and log_tail(log).startswith("...")


def test_the_sheets_python_commands_use_the_venvs_python() -> None:
    """``python my_worker.py`` runs a Python without redis-py; the sheet says ``.venv/bin/python``."""
    sheet = (Path(__file__).resolve().parents[1] / "labs" / "lab3" / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r'WORKER="([^"]+)"', sheet)
    pythons = [c for c in commands if "python" in shlex.split(c)[0]]
    assert pythons and all(shlex.split(c)[0] == ".venv/bin/python" for c in pythons), pythons
