"""The labs in the same gradebook: ``check-lab-1 IMPL=…`` and ``check-lab-3 WORKER=…`` of a submission, sandboxed.

A submission that includes ``lab1.py`` (any file named ``*lab1*.py``) gets lab 1's checker
(``python -m labs.lab1.check --impl <file> --redis-url <the sandbox's Redis>``); one with
``lab3_worker.py`` gets lab 3's (``python -m labs.lab3.check --worker "python lab3_worker.py"``)
on a Sentinel topology of the sandbox's own. The checker imports or runs the student's code, so
it runs in the submission's sandbox like a notebook (:meth:`labs.grading.sandbox.Sandbox.run`,
``{work}``, ``{redis_url}`` and ``{python}`` filled in there), with the ``.py`` files beside the
lab file copied into its work folder. Each ``PASS``/``FAIL`` line of the checker is one line of
the gradebook, and a lab is worth :data:`LAB_POINTS` whatever the number of its checks (each
check ``LAB_POINTS / n``), so a lab whose checker never got to its checks weighs the same as one
that failed them. A checker past its limit (a lab worker that never exits, an implementation that
blocks forever) is stopped with its whole sandbox, and every check of that lab gets zero with
the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LAB_POINTS = 5.0
RANDOM_PREFIX = re.compile(r"\b\w+check:[0-9a-f]{6,}:")  # the checker's own key prefix, random per run
LINE = re.compile(r"^(?P<verdict>PASS|FAIL)\s+(?P<name>.+?)\s*$")


@dataclass(frozen=True)
class LabCheck:
    """One check of a lab as a gradebook line: its points when it passed, the checker's detail as the reason."""

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


def lab1_command(impl: Path) -> list[str]:
    """Lab 1's checker on the student's file, in the sandbox's work folder, against the sandbox's Redis."""
    return ["{python}", "-m", "labs.lab1.check", "--impl", f"{{work}}/{impl.name}", "--redis-url", "{redis_url}"]


def lab3_command(worker: Path) -> list[str]:
    """Lab 3's checker with the student's worker (its own Sentinel topology: the launcher's ports, in the
    sandbox's network namespace)."""
    return ["{python}", "-m", "labs.lab3.check", "--worker", f"{{python}} {{work}}/{worker.name}"]


def companions(lab_file: Path) -> list[Path]:
    """The lab file and the ``.py`` files beside it (a student's helper modules), copied into the sandbox."""
    return sorted({lab_file, *(path for path in lab_file.parent.glob("*.py") if path.is_file())})


def verdict(lab: str, output: str, *, exit_code: int | None, timed_out: bool, timeout_s: float,
            note: str | None = None) -> list[LabCheck]:
    """The checks of one checker run, or one zero check with the reason when it hung or printed none."""
    if timed_out:
        reason = f"проверка лабораторной не закончилась за {timeout_s:.0f} с (воркер не завершается?) и остановлена"
        return [LabCheck(lab, "checker finished in time", False, reason)]
    checks = parse(lab, output)
    if not checks:
        tail = " | ".join(output.strip().splitlines()[-3:])
        reason = f"проверка не выдала ни одного PASS/FAIL (код {exit_code}): {tail}"
        if note:
            reason += f" ({note})"
        return [LabCheck(lab, "checker ran", False, reason)]
    return checks
