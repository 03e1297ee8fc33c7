"""A folder of submissions, one per student, in the layouts instructors actually get.

- nbgrader's own: ``<dir>/<student>/<assignment>/<notebook>.ipynb`` (``submitted/`` after ``nbgrader collect``);
- nbgrader's exchange inbound: ``<dir>/<student>+<assignment>+<timestamp>/...``;
- a plain download: ``<dir>/<student>/<notebook>.ipynb`` (files at any depth below the student's folder);
- a zip per student: ``<dir>/<student>.zip`` (unpacked into the work directory; an archive that is
  not a zip or has a member that would land outside it is that student's zero, not the run's end).

A notebook is recognised by its file name (the release's); the labs by ``*lab1*.py`` and
``lab3_worker.py``. Hidden files and ``.ipynb_checkpoints`` are ignored.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Submission:
    """One student's files: the notebooks found (by release name) and the lab files, if any."""

    student: str
    root: Path
    notebooks: dict[str, Path] = field(default_factory=dict)
    lab1: Path | None = None
    lab3: Path | None = None
    problem: str | None = None


def student_id(folder_name: str) -> str:
    """``alice+workbook+2026-12-02 10:00:00 UTC`` (the exchange's name) -> ``alice``."""
    return folder_name.split("+")[0]


def _files(root: Path) -> list[Path]:
    return sorted(
        path for path in root.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


def unpack(archive: Path, target: Path) -> Path:
    """Unpack a student's zip into ``target`` (refusing members that would land outside it)."""
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.namelist():
            if not (target / member).resolve().is_relative_to(target.resolve()):
                raise ValueError(f"{archive.name}: member {member!r} would land outside the folder")
        zipped.extractall(target)
    return target


def read_submission(student: str, root: Path, notebook_names: Sequence[str]) -> Submission:
    """The files of one student's folder."""
    files = _files(root)
    notebooks = {}
    for name in notebook_names:
        found = [path for path in files if path.name == f"{name}.ipynb"]
        if found:
            notebooks[name] = found[0]
    lab1 = next((path for path in files if path.suffix == ".py" and "lab1" in path.stem), None)
    lab3 = next((path for path in files if path.name == "lab3_worker.py"), None)
    return Submission(student, root, notebooks, lab1, lab3)


def find_submissions(folder: Path, notebook_names: Sequence[str], unpack_dir: Path) -> list[Submission]:
    """Every submission in ``folder``, sorted by student id (a student seen twice: the later folder wins)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder of submissions: {folder}")
    found: dict[str, Submission] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix == ".zip":
            student = student_id(entry.stem)
            try:
                found[student] = read_submission(student, unpack(entry, unpack_dir / student), notebook_names)
            except (ValueError, zipfile.BadZipFile) as exc:  # one bad archive costs its student, not the run
                problem = f"архив {entry.name} не принят: {exc}"
                found[student] = Submission(student, unpack_dir / student, problem=problem)
        elif entry.is_dir():
            student = student_id(entry.name)
            found[student] = read_submission(student, entry, notebook_names)
    return [found[key] for key in sorted(found)]
