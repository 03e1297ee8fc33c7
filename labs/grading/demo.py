"""Submissions made from the reference and the release: a class to grade in a demo or a test.

:func:`solved` fills each answer cell of the release with the reference's solution (markers
dropped), as a student who got everything right would hand it in; :func:`make_class` writes
a folder of such submissions, one per :data:`KINDS` entry, in nbgrader's layout
(``<student>/<assignment>/<notebook>.ipynb``). Each bad kind spoils one exercise (or the lab,
or the file) of an otherwise solved submission, so the grade shows that only that part lost;
``hostile`` puts the answer cell of :func:`labs.grading.hostile.demo_code` there (it reads the
answer key and the solved classmate, writes into ``/tmp`` and ``grades/``, calls the machine's
Redis), to see with ``make grade`` that the sandbox lets none of it happen.
"""

from __future__ import annotations

import copy
import functools
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

from labs import nbtypes
from labs import notebook_release as release
from labs.grading import hostile

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
BAD_CODE = {
    "hang": "import time\nwhile True:\n    time.sleep(0.1)",
    "raise": 'raise RuntimeError("the student\'s own bug")',
    "flushall": "r.flushall()",
    "shutdown": "r.shutdown(nosave=True)",
    "segfault": 'r.execute_command("DEBUG", "SEGFAULT")',
    "kernel-death": "import os\nos._exit(1)",
}
# A plausible wrong answer per exercise (the check must say what is wrong, not that nothing was computed);
# an exercise missing here gets an answer that computes nothing.
WRONG_ANSWERS = {
    "05.1": "edge_results = {\n    block_ms: block_past_socket_timeout(REDIS_URL, edge_stream, socket_timeout_s=0.5, "
            "block_ms=block_ms)\n    for block_ms in (300, 400)  # both below the socket timeout\n}",
    "05.2": 'held_64 = work_held_at_crash(REDIS_URL, P + "ex:held:64", count=64, read_ahead=False,\n'
            "                             crash_after_handled=64).held_at_crash\n"
            'held_65 = work_held_at_crash(REDIS_URL, P + "ex:held:65", count=64, read_ahead=False,\n'
            "                             crash_after_handled=64).held_at_crash  # copied, 64 left in",
    "05.3": 'effects_by_ttl = {ttl_ms: late_replay(r, P + f"ex:ttl:{ttl_ms}", ttl_ms=ttl_ms, replay_after_ms=300)\n'
            "                  for ttl_ms in (100, 200)}  # every TTL shorter than the replay",
}
NOTHING = "pass  # a wrong answer: nothing computed"
NEVER_EXITS = "import time\n\nwhile True:  # a lab implementation that never returns control\n    time.sleep(1)\n"


def _solution_source(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() not in MARKERS)


def solved(released: NotebookNode, reference: NotebookNode) -> NotebookNode:
    """The release with every answer cell holding the reference's solution."""
    nb = copy.deepcopy(released)
    by_id = {cell.get("id"): cell for cell in reference.cells}
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.get("id") in by_id:
            cell.source = _solution_source(by_id[cell["id"]].source)
    return nb


def _cells_of(nb: NotebookNode, exercise: str, prefix: str) -> list[NotebookNode]:
    target = prefix + release.safe_id(exercise)
    return [cell for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == target]


def spoil_answer(nb: NotebookNode, exercise: str, code: str) -> NotebookNode:
    """``nb`` with the answer cell of ``exercise`` replaced by ``code``."""
    for cell in _cells_of(nb, exercise, release.ANSWER_PREFIX):
        cell.source = code
    return nb


def _spoil_with(code: str, nb: NotebookNode, exercise: str) -> NotebookNode:
    return spoil_answer(nb, exercise, code)


def delete_check(nb: NotebookNode, exercise: str) -> NotebookNode:
    nb.cells = [cell for cell in nb.cells if cell not in _cells_of(nb, exercise, release.CHECK_PREFIX)]
    return nb


def edit_check(nb: NotebookNode, exercise: str) -> NotebookNode:
    for cell in _cells_of(nb, exercise, release.CHECK_PREFIX):
        cell.source = 'print("проверка пройдена")  # the check replaced by the student'
    return nb


Spoiler = Callable[[NotebookNode, str], NotebookNode]
SPOILERS: dict[str, Spoiler] = {
    **{kind: functools.partial(_spoil_with, code) for kind, code in BAD_CODE.items()},
    "wrong": lambda nb, exercise: spoil_answer(nb, exercise, WRONG_ANSWERS.get(exercise, NOTHING)),
    "deleted-locked": delete_check,
    "edited-locked": edit_check,
}
KINDS = ("solved", "untouched", *SPOILERS, "invalid-json", "lab-never-exits", "hostile")


def write_submission(folder: Path, student: str, notebook_name: str, nb: NotebookNode | str,
                     assignment: str = "workbook") -> Path:
    """Write one student's notebook (a notebook, or raw text for a broken file) in nbgrader's layout."""
    target = folder / student / assignment / f"{notebook_name}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, str):
        target.write_text(nb, encoding="utf-8")
    else:
        nbtypes.write(nb, target)
    return target


@dataclass(frozen=True)
class DemoNotebook:
    """One notebook of a demo class: its name, the release, the reference, and the exercise the bad kinds spoil."""

    name: str
    released: NotebookNode
    reference: NotebookNode
    exercise: str


def hostile_targets(folder: Path, notebook: DemoNotebook, marker: str) -> hostile.Targets:
    """Where the demo's hostile submission aims: the answer key, the solved classmate, ``grades/``, the machine's
    Redis ports and ``/tmp``."""
    return hostile.Targets(
        answer_key=ROOT / "notebooks" / f"{notebook.name}.ipynb",
        other_submission=folder / "s00-solved" / "workbook" / f"{notebook.name}.ipynb",
        grades_dir=ROOT / "grades", submissions_dir=folder, marker=marker, port=6379, victim_pid=1,
        exercise=notebook.exercise, answer_grade_id=release.ANSWER_PREFIX + release.safe_id(notebook.exercise))


def _content(kind: str, notebook: DemoNotebook, folder: Path, marker: str) -> NotebookNode | str:
    if kind == "untouched":
        return copy.deepcopy(notebook.released)
    if kind == "invalid-json":
        return nbtypes.writes(solved(notebook.released, notebook.reference))[:-200]
    content = solved(notebook.released, notebook.reference)
    if kind == "hostile":
        return spoil_answer(content, notebook.exercise, hostile.demo_code(hostile_targets(folder, notebook, marker)))
    if kind in SPOILERS:
        content = SPOILERS[kind](content, notebook.exercise)
    return content


def make_class(folder: Path, notebooks: Sequence[DemoNotebook], kinds: Sequence[str], *, students: int = 0,
               lab1: bool = False, marker: str = "labs-grading-hostile") -> dict[str, str]:
    """One submission per kind in ``folder`` (student ``sNN-<kind>``, ``students`` of them cycling through the
    kinds when given); each holds every notebook, the kind spoiling its exercise. With ``lab1`` the solved
    submission carries the reference ``lab1.py`` and ``lab-never-exits`` one that never returns. Returns student
    id -> kind."""
    made = {}
    count = students or len(kinds)
    for index in range(count):
        kind = kinds[index % len(kinds)]
        student = f"s{index:02d}-{kind}"
        made[student] = kind
        for notebook in notebooks:
            write_submission(folder, student, notebook.name, _content(kind, notebook, folder, marker))
        if lab1 and kind in ("solved", "invalid-json"):
            shutil.copy2(ROOT / "solutions" / "lab1.py", folder / student / "lab1.py")
        if lab1 and kind == "lab-never-exits":
            (folder / student / "lab1.py").write_text(NEVER_EXITS, encoding="utf-8")
    return made
