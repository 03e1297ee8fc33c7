"""The student edition of the notebooks (``make student``): solutions blanked, everything else kept.

Each notebook of ``notebooks/`` goes through nbconvert's ``NotebookExporter`` with three
preprocessors:

1. nbgrader's ``ClearSolutions``: in every cell marked as a solution (cell metadata
   ``nbgrader.solution``), the ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region becomes
   ``# ваш код`` at the region's indentation (the lines around it, the task in words, stay);
   a region in a cell that is not marked raises, so a marker can never leak;
2. ``ClearOutputPreprocessor``: no outputs, no execution counts;
3. :class:`StudentCells`: the check cells and the exercises' own cells get the
   ``raises-exception`` tag, so that "Run All" goes on past a check that fails on a blank or a
   student's cell that raises; the first code cell ends with ``student_mode()`` (a Redis error
   is one Russian line, ``reset("NN.K")`` re-prepares an exercise: ``student.py``); the last
   code cell, the clean-up, runs only when the student sets ``FINISHED = True``, so Redis stays
   up for the exercises after Run All; prose true of the reference only is rewritten
   (``STUDENT_PROSE``); the nbgrader metadata goes (nbgrader's own tools are not used), and a
   first cell says what this copy is.

The explanations, the checks and the quizzes stay. ``python -m labs.exercises.edition`` writes
``student/notebooks/`` and never overwrites a notebook a student may have worked in unless
asked to (``--force`` or ``--force 02``, which keep the old file as ``<name>.ipynb.<time>.bak``).
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import ClearOutputPreprocessor, Preprocessor
from nbformat import NotebookNode
from traitlets.config import Config

from labs import nbtypes
from labs.notebook_release import graded_text

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
    "«Подсказка» откроется по клику (сначала намёк, под ним — ещё один шаг). «Run All» доходит до конца: "
    "ни непройденная проверка, ни ошибка в вашей ячейке его не останавливают, а последняя ячейка "
    "Redis не гасит — он нужен для заданий. Вторая попытка — просто выполните ячейку с решением снова: "
    "каждая попытка начинается с чистого состояния, а проверка судит только последнюю (ячейка над решением "
    'выполняется заново сама; вручную — она же или `reset("NN.K")`). Закончили — последняя ячейка с '
    "`FINISHED = True` или `make down` в терминале."
)
# What the first code cell gains in the student edition (labs/exercises/student.py).
STUDENT_SETUP = (
    '\n\n# Student edition: a Redis error in any cell is one line with what to run; reset("NN.K") re-prepares.\n'
    "from labs.exercises.student import reset, student_mode\n\n"
    "student_mode()"
)
CLEANUP_GUARD = (
    "# Уборка: удаляет ключи тетрадки и гасит Redis, если его подняла она. При «Run All» ничего не делает,\n"
    "# чтобы Redis остался для заданий. Закончили — поставьте FINISHED = True и выполните (или `make down`).\n"
    "FINISHED = False\n"
    "if not FINISHED:\n"
    '    print("Redis и ключи тетрадки оставлены для заданий; уборка — FINISHED = True здесь или make down.")\n'
    "else:\n"
)
# Prose that is true of the reference only: (pattern, what the student edition says instead).
STUDENT_PROSE = (
    (re.compile(r"\s*\(в\s+(?:этой\s+)?тетрадке\s+там\s+(?:уже\s+стоит\s+)?эталон\)"), ""),
    (re.compile(r",\s+тест\s+—\s+`tests/test_exercises_nb\d\d\.py`"), ""),
    (re.compile(r"\s*\(`tests/test_exercises_nb\d\d\.py`\)"), ""),
    (re.compile(r"^Последняя ячейка", re.MULTILINE), "Последняя ячейка (когда вы поставите в ней `FINISHED = True`)"),
    (
        re.compile(r"^## Уборка\n\n", re.MULTILINE),
        "## Уборка\n\nКогда закончите, `FINISHED = True` в последней ячейке. ",
    ),
)


def check_ids(source: str) -> list[str]:
    """The exercise ids a cell's source checks: ``check("02.4")`` at the start of a line gives ``["02.4"]``."""
    return [match["id"] for match in CHECK_CALL.finditer(source)]


def is_solution(cell: NotebookNode) -> bool:
    """True for a cell marked as a solution (nbgrader's ``metadata.nbgrader.solution``)."""
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution", False))


def raises_in_student_edition(cell: NotebookNode) -> bool:
    """Check cells and the student's own cells may raise: Run All goes on past them."""
    return bool(cell.cell_type == "code" and (check_ids(cell.source) or cell.metadata.get("exercise")))


def student_prose(source: str) -> str:
    """A markdown cell as the student edition says it (see ``STUDENT_PROSE``)."""
    for pattern, replacement in STUDENT_PROSE:
        source = pattern.sub(replacement, source)
    return source


def student_setup(source: str) -> str:
    """The first code cell, ending with ``student_mode()``."""
    return source.rstrip("\n") + STUDENT_SETUP


def guarded_cleanup(source: str) -> str:
    """The last code cell (the clean-up), run only when the student sets ``FINISHED = True``."""
    body = "\n".join(f"    {line}" if line.strip() else "" for line in source.rstrip("\n").splitlines())
    return CLEANUP_GUARD + body


def student_code_cells(nb: NotebookNode) -> None:
    """Student mode in the first code cell, the guarded clean-up in the last, the prose made true."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if len(code) >= 2:
        code[0].source = student_setup(code[0].source)
        if not code[-1].metadata.get("exercise"):  # a notebook cut to its exercises has no clean-up
            code[-1].source = guarded_cleanup(code[-1].source)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = student_prose(cell.source)


class StudentCells(Preprocessor):
    """Tag check and exercise cells ``raises-exception``, drop the source's nbgrader metadata
    (:mod:`labs.grading.release` writes the release's), put the banner first."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        for cell in nb.cells:
            cell.metadata.pop("nbgrader", None)
            if raises_in_student_edition(cell):
                tags = cell.metadata.setdefault("tags", [])
                if RAISES not in tags:
                    tags.append(RAISES)
        student_code_cells(nb)
        name = resources.get("metadata", {}).get("name", "")
        banner = nbtypes.markdown_cell(BANNER.format(name=f"{name}.ipynb"), BANNER_ID)
        nb.cells.insert(0, banner)
        nb.metadata["student_edition"] = True
        return nb, resources


def _exporter() -> NotebookExporter:
    from nbgrader.preprocessors import ClearSolutions  # imported here: nbgrader's import takes ~1 s

    config = Config()
    config.ClearSolutions.code_stub = {"python": CODE_STUB}
    config.ClearSolutions.text_stub = TEXT_STUB
    config.ClearSolutions.enforce_metadata = True
    return nbtypes.exporter(config, [kind(config=config) for kind in (ClearSolutions, ClearOutputPreprocessor,
                                                                       StudentCells)])


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


def backup_path(target: Path, now: datetime.datetime | None = None) -> Path:
    """``02_x.ipynb.20260102-150405.bak`` beside ``target``, never one that exists (``-2``, ``-3``... then)."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = target.with_name(f"{target.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        n += 1
        candidate = target.with_name(f"{target.name}.{stamp}-{n}.bak")
    return candidate


def _forced(notebook: Path, force: bool | Collection[str]) -> bool:
    """``force=True``: every notebook; a collection: those whose name starts with one of its items ("02")."""
    if isinstance(force, bool):
        return force
    return any(notebook.name.startswith(item) for item in force)


def write_edition(
    source_dir: Path = SOURCE_DIR, out_dir: Path = STUDENT_DIR, *, force: bool | Collection[str] = False
) -> list[Written]:
    """Write the student edition of every ``*.ipynb`` in ``source_dir`` into ``out_dir``.

    A notebook that differs from a fresh copy (the student's work) is kept, unless ``force`` is
    True (every notebook) or names it (``["02"]``): then the old file is kept as a timestamped
    ``.bak`` (:func:`backup_path`) and a fresh copy written.
    """
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
        elif not _forced(notebook, force):
            results.append(Written(target, "kept"))
            continue
        else:
            shutil.copy2(target, backup_path(target))
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
        "--force",
        nargs="*",
        metavar="NN",
        help="replace notebooks that differ, all of them or those numbered NN (the old one is kept as a .bak)",
    )
    args = parser.parse_args(argv)
    force: bool | list[str] = False if args.force is None else (args.force or True)
    try:
        results = write_edition(args.source, args.out, force=force)
    except (FileNotFoundError, RuntimeError) as exc:  # RuntimeError: ClearSolutions found a malformed region
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    for item in results:
        note = f" (differs from a fresh copy: your work? FORCE={item.path.name[:2]} replaces it, keeping a .bak)"
        shown = item.path.relative_to(Path.cwd()) if item.path.is_relative_to(Path.cwd()) else item.path
        print(f"{item.outcome:>9}  {shown}{note if item.outcome == 'kept' else ''}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
