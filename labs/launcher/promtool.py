"""``promtool check rules`` and ``promtool test rules`` on the production rules and on their lab copy.

``make check-rules`` and ``tests/test_rule_scale.py`` run :func:`verify`: the rules in
``monitoring/rules`` with their tests in ``monitoring/tests``, then the copy generated with the
lab's time scale (rules and tests scaled alike) in a directory of its own.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from labs.launcher import prom_binaries
from labs.launcher.rule_scale import MONITORING_DIR, TimeScale, write_lab_copy

# A guard against a hung promtool, not a speed claim: `test rules` is CPU-bound (a few seconds of CPU
# here, quiet) and took over 60 s of wall time on a machine 15 times oversubscribed (tests/FLAKES.md);
# the test's own pytest timeout (180 s) stays the outer bound.
TIMEOUT_S = 150.0


@dataclass(frozen=True)
class PromtoolRun:
    """One promtool call: what ran, whether it passed, what it said."""

    what: str
    ok: bool
    output: str


def promtool(*args: str, cwd: Path | None = None) -> PromtoolRun:
    """Run ``promtool args...``; never raises for a failing check (``ok`` is False then)."""
    exe = prom_binaries.find(prom_binaries.PROMTOOL)
    done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=cwd)
    return PromtoolRun(" ".join(["promtool", *args]), done.returncode == 0, (done.stdout + done.stderr).strip())


def check_and_test(root: Path) -> list[PromtoolRun]:
    """``check rules`` on ``root/rules/*.yml`` and ``test rules`` on ``root/tests/*.yml``."""
    rules = sorted(str(p) for p in (root / "rules").glob("*.yml"))
    tests = sorted(str(p) for p in (root / "tests").glob("*.yml"))
    return [promtool("check", "rules", *rules), promtool("test", "rules", *tests)]


def verify(lab_dir: Path, scale: TimeScale | None = None, *, source: Path = MONITORING_DIR) -> list[PromtoolRun]:
    """Check and test the production rules, then their lab copy written to ``lab_dir``."""
    write_lab_copy(lab_dir, scale or TimeScale(), source=source, tests=True)
    return [*check_and_test(source), *check_and_test(lab_dir)]
