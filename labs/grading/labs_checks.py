"""The labs in the same gradebook: ``check-lab-1 IMPL=…`` and ``check-lab-3 WORKER=…`` of a submission.

A submission that includes ``lab1.py`` (any file named ``*lab1*.py``) gets lab 1's checker
(``python -m labs.lab1.check --impl <file> --redis-url <the sandbox's Redis>``); one with
``lab3_worker.py`` gets lab 3's (``python -m labs.lab3.check --worker "python lab3_worker.py"``)
on a Sentinel topology of the sandbox's own (``LAB_RUN_DIR`` and ports of its own). Each
``PASS``/``FAIL`` line of the checker is one line of the gradebook, and a lab is worth
:data:`LAB_POINTS` whatever the number of its checks (each check ``LAB_POINTS / n``), so a lab
whose checker never got to its checks weighs the same as one that failed them. A checker that outlives its limit (a lab
worker that never exits, an implementation that blocks forever) is killed with everything it
started, and every check of that lab gets zero with the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LAB_POINTS = 5.0
RANDOM_PREFIX = re.compile(r"\b\w+check:[0-9a-f]{6,}:")  # the checker's own key prefix, random per run
LINE = re.compile(r"^(?P<verdict>PASS|FAIL)\s+(?P<name>.+?)\s*$")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LabCheck:
    """One check of a lab as a gradebook line: 1 point when it passed, the checker's detail as the reason."""

    lab: str
    name: str
    passed: bool
    detail: str
    max_score: float = LAB_POINTS

    @property
    def score(self) -> float:
        return self.max_score if self.passed else 0.0


def parse(lab: str, output: str) -> list[LabCheck]:
    """The checker's ``PASS``/``FAIL`` lines (each followed by its indented detail line)."""
    lines = output.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = LINE.match(line)
        if match:
            detail = lines[index + 1].strip() if index + 1 < len(lines) and lines[index + 1].startswith(" ") else ""
            name = RANDOM_PREFIX.sub("", match["name"])
            found.append(LabCheck(lab, name, match["verdict"] == "PASS", detail))
    return [LabCheck(c.lab, c.name, c.passed, c.detail, LAB_POINTS / len(found)) for c in found]


def lab1_command(impl: Path, redis_url: str) -> list[str]:
    return [sys.executable, "-m", "labs.lab1.check", "--impl", str(impl), "--redis-url", redis_url]


def lab3_command(worker: Path) -> list[str]:
    return [sys.executable, "-m", "labs.lab3.check", "--worker", f"{sys.executable} {worker}"]


def lab3_env(env: dict[str, str], run_dir: Path) -> dict[str, str]:
    """The sandbox's environment (its Sentinel ports: :meth:`Sandbox.pick_lab_ports`), lab 3's own run dir."""
    return {**env, "LAB_RUN_DIR": str(run_dir), "LAB_REPORTS_DIR": str(run_dir / "reports")}


def run_checker(lab: str, command: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float,
                on_timeout: Callable[[], object]) -> list[LabCheck]:
    """Run a lab checker; its checks, or one zero check with the reason when it hung or printed none."""
    env = {**env, "NO_COLOR": "1", "COLUMNS": "240", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        on_timeout()
        proc.kill()
        proc.communicate()
        reason = f"проверка лабораторной не закончилась за {timeout_s:.0f} с (воркер не завершается?) и остановлена"
        return [LabCheck(lab, "checker finished in time", False, reason)]
    checks = parse(lab, output)
    if not checks:
        tail = " | ".join(output.strip().splitlines()[-3:])
        reason = f"проверка не выдала ни одного PASS/FAIL (код {proc.returncode}): {tail}"
        return [LabCheck(lab, "checker ran", False, reason)]
    return checks
