"""Student kits: starter code derived from a reference solution, and the check that keeps them in sync.

A reference marks each part a student writes::

    def produce_one(...) -> str:
        \"\"\"XADD ...\"\"\"
        # region solution: XADD the fields with an approximate MAXLEN and return the id
        return str(client.xadd(...))
        # endregion

The starter keeps everything else and replaces each marked region with a stub that states
the task, at the region's indentation::

        raise NotImplementedError(
            "XADD the fields with an approximate MAXLEN and return the id"
        )

``python -m labs.kit --write`` regenerates every starter; ``python -m labs.kit --check``
exits 1 when a committed starter differs from what the reference gives (the test suite
runs the same check, so an exercise never drifts from its answer).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGION = re.compile(r"^(?P<indent>\s*)# region solution:\s*(?P<task>.+?)\s*$")
END = re.compile(r"^\s*# endregion\s*$")
LINE_LENGTH = 100


class KitError(ValueError):
    """The reference's region markers are malformed (unclosed, nested, or missing)."""


@dataclass(frozen=True)
class Kit:
    """A reference module and the starter derived from it (paths relative to the repository)."""

    reference: Path
    starter: Path
    check_command: str = "make check-lab-1 IMPL=path/to/your_file.py"

    def header(self) -> str:
        return (
            f"# Starter code for you to complete, generated from {self.reference.as_posix()}\n"
            f"# by `python -m labs.kit --write`. Copy it to a file of your own, replace each\n"
            "# `raise NotImplementedError(...)` with your code, and check it with\n"
            f"# `{self.check_command}`.\n"
            "# ruff: noqa: F401  (the reference's imports stay, though the cut-out parts used some)\n"
        )


KITS: tuple[Kit, ...] = (
    Kit(Path("solutions/lab1.py"), Path("labs/lab1/starter.py")),
    Kit(
        Path("labs/lab3/worker_reference.py"),
        Path("labs/lab3/worker_starter.py"),
        'make check-lab-3 WORKER=".venv/bin/python path/to/your_worker.py"',
    ),
)


def stub(indent: str, task: str) -> list[str]:
    """The lines that replace one solution region: a NotImplementedError carrying the task."""
    width = max(40, LINE_LENGTH - len(indent) - 8)
    parts = textwrap.wrap(task, width=width, break_long_words=False, break_on_hyphens=False)
    chunks = [f'{indent}    "{part} "' for part in parts[:-1]] + [f'{indent}    "{parts[-1]}"']
    return [f"{indent}raise NotImplementedError(", *chunks, f"{indent})"]


def derive(reference: str, header: str = "") -> str:
    """The starter text: ``reference`` with each ``# region solution`` block replaced by a stub."""
    out: list[str] = []
    region: tuple[int, str, str] | None = None
    regions = 0
    for number, line in enumerate(reference.splitlines(), start=1):
        opened = REGION.match(line)
        if region is None:
            if END.match(line):
                raise KitError(f"line {number}: '# endregion' without a region")
            if opened:
                region = (number, opened["indent"], opened["task"].replace('"', "'"))
            else:
                out.append(line)
            continue
        if opened:
            raise KitError(f"line {number}: a region opened inside the region of line {region[0]}")
        if END.match(line):
            out.extend(stub(region[1], region[2]))
            region, regions = None, regions + 1
    if region is not None:
        raise KitError(f"line {region[0]}: the region is never closed with '# endregion'")
    if regions == 0:
        raise KitError("no '# region solution: <task>' markers found")
    return header + "\n".join(out) + "\n"


def derived_text(kit: Kit, root: Path = ROOT) -> str:
    return derive((root / kit.reference).read_text(encoding="utf-8"), kit.header())


def check(kits: Sequence[Kit] = KITS, root: Path = ROOT) -> list[str]:
    """The starters that differ from their reference (an empty list when all are in sync)."""
    problems: list[str] = []
    for kit in kits:
        target = root / kit.starter
        if not target.exists():
            problems.append(f"{kit.starter} is missing; run `python -m labs.kit --write`")
        elif target.read_text(encoding="utf-8") != derived_text(kit, root):
            problems.append(
                f"{kit.starter} differs from what {kit.reference} gives; run `python -m labs.kit --write`"
            )
    return problems


def write(kits: Sequence[Kit] = KITS, root: Path = ROOT) -> list[Path]:
    """Regenerate every starter; returns the files written."""
    written: list[Path] = []
    for kit in kits:
        target = root / kit.starter
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(derived_text(kit, root), encoding="utf-8")
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labs.kit", description="Derive the student starters from their references."
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a starter is out of sync")
    mode.add_argument("--write", action="store_true", help="regenerate the starters from the references")
    args = parser.parse_args(argv)
    try:
        if args.write:
            for path in write():
                sys.stdout.write(f"wrote {path.relative_to(ROOT)}\n")
            return 0
        problems = check()
    except KitError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    for problem in problems:
        sys.stderr.write(f"out of sync: {problem}\n")
    if not problems:
        sys.stdout.write("starters are in sync with their references\n")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
