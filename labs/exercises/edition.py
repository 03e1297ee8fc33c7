"""The student edition of the notebooks (``make student``): solutions blanked, everything else kept.

Each notebook of ``notebooks/`` goes through nbconvert's ``NotebookExporter`` with three
preprocessors:

1. nbgrader's ``ClearSolutions``: in every cell marked as a solution (cell metadata
   ``nbgrader.solution``), the ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region becomes
   ``# ваш код`` at the region's indentation (the lines around it, the task in words, stay);
   a region in a cell that is not marked raises, so a marker can never leak;
2. ``ClearOutputPreprocessor``: no outputs, no execution counts;
3. :class:`StudentCells`: the check cells (``check("NN.K")``) get the ``raises-exception`` tag,
   so that "Run All" goes on past a check that fails on a blank; the nbgrader metadata goes
   (nbgrader's own tools are not used), and a first cell says what this copy is.

The explanations, the checks and the quizzes stay. ``python -m labs.exercises.edition`` writes
``student/notebooks/`` and never overwrites a notebook a student may have worked in unless
asked to (``--force`` keeps the old file as ``<name>.ipynb.bak``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import ClearOutputPreprocessor, Preprocessor
from traitlets.config import Config

from labs.grading.release import graded_text

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "notebooks"
STUDENT_DIR = ROOT / "student" / "notebooks"
CODE_STUB = "# ваш код"
TEXT_STUB = "_Ваш ответ:_"
CHECK_CALL = re.compile(r"^check\(\s*[\"'](?P<id>\d{2}\.\d+)[\"']", re.MULTILINE)
RAISES = "raises-exception"
BANNER_ID = "student-edition"
BANNER = (
    "> **Студенческая версия.** Сгенерирована командой `make student` из `notebooks/{name}`: "
    "в ячейках заданий решение заменено на `# ваш код`, всё остальное — как в тетрадке. Впишите своё "
    "решение и выполните ячейку `check(...)` под ним: она скажет, что верно или куда смотреть, а "
    "«Подсказка» откроется по клику. «Run All» не останавливается на непройденной проверке."
)


def check_ids(source: str) -> list[str]:
    """The exercise ids a cell's source checks: ``check("02.4")`` at the start of a line gives ``["02.4"]``."""
    return [match["id"] for match in CHECK_CALL.finditer(source)]


def is_solution(cell: Any) -> bool:
    """True for a cell marked as a solution (nbgrader's ``metadata.nbgrader.solution``)."""
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution", False))


class StudentCells(Preprocessor):
    """Tag check cells ``raises-exception``, drop nbgrader metadata, put the banner first."""

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        for cell in nb.cells:
            cell.metadata.pop("nbgrader", None)
            if cell.cell_type == "code" and check_ids(cell.source):
                tags = cell.metadata.setdefault("tags", [])
                if RAISES not in tags:
                    tags.append(RAISES)
        name = resources.get("metadata", {}).get("name", "")
        banner = nbformat.v4.new_markdown_cell(BANNER.format(name=f"{name}.ipynb"), id=BANNER_ID)  # type: ignore[no-untyped-call]
        nb.cells.insert(0, banner)
        nb.metadata["student_edition"] = True
        return nb, resources


def _exporter() -> NotebookExporter:
    from nbgrader.preprocessors import ClearSolutions  # imported here: nbgrader's import takes ~1 s

    config = Config()
    config.ClearSolutions.code_stub = {"python": CODE_STUB}
    config.ClearSolutions.text_stub = TEXT_STUB
    config.ClearSolutions.enforce_metadata = True
    exporter = NotebookExporter(config=config)  # type: ignore[no-untyped-call]
    for preprocessor in (ClearSolutions, ClearOutputPreprocessor, StudentCells):
        exporter.register_preprocessor(preprocessor(config=config), enabled=True)  # type: ignore[no-untyped-call]
    return exporter


def student_text(notebook: Path, exporter: NotebookExporter | None = None) -> str:
    """The student edition of one notebook, as the text of an ``.ipynb`` file."""
    exporter = exporter or _exporter()
    body, _ = exporter.from_filename(str(notebook), resources={"metadata": {"name": notebook.stem}})
    return graded_text(str(body), notebook)  # nbgrader metadata for autograde: labs/grading/release.py


@dataclass(frozen=True)
class Written:
    """What happened to one notebook: ``written``, ``unchanged``, ``kept`` (the student's) or ``replaced``."""

    path: Path
    outcome: str


def write_edition(source_dir: Path = SOURCE_DIR, out_dir: Path = STUDENT_DIR, *, force: bool = False) -> list[Written]:
    """Write the student edition of every ``*.ipynb`` in ``source_dir`` into ``out_dir``."""
    notebooks = sorted(source_dir.glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no notebooks in {source_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    exporter = _exporter()
    results = []
    for notebook in notebooks:
        target = out_dir / notebook.name
        text = student_text(notebook, exporter)
        if not target.exists():
            outcome = "written"
        elif target.read_text(encoding="utf-8") == text:
            results.append(Written(target, "unchanged"))
            continue
        elif not force:
            results.append(Written(target, "kept"))
            continue
        else:
            shutil.copy2(target, target.with_suffix(".ipynb.bak"))
            outcome = "replaced"
        target.write_text(text, encoding="utf-8")
        results.append(Written(target, outcome))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labs.exercises.edition",
        description="Write the student edition of the notebooks: solution regions blanked, checks and quizzes kept.",
    )
    parser.add_argument("--source", type=Path, default=SOURCE_DIR, help="the reference notebooks (%(default)s)")
    parser.add_argument("--out", type=Path, default=STUDENT_DIR, help="where the student edition goes (%(default)s)")
    parser.add_argument(
        "--force", action="store_true", help="replace notebooks that differ (the old one is kept as .ipynb.bak)"
    )
    args = parser.parse_args(argv)
    try:
        results = write_edition(args.source, args.out, force=args.force)
    except (FileNotFoundError, RuntimeError) as exc:  # RuntimeError: ClearSolutions found a malformed region
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    for item in results:
        note = " (differs from a fresh copy: your work? FORCE=1 replaces it, keeping a .bak)"
        shown = item.path.relative_to(Path.cwd()) if item.path.is_relative_to(Path.cwd()) else item.path
        print(f"{item.outcome:>9}  {shown}{note if item.outcome == 'kept' else ''}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
