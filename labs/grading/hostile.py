"""Answer cells a hostile student might hand in: each tries one harm, and would score had it worked.

The grading sandbox is tested by grading these (``tests/test_grading_hostile.py``) in the same
run as a solved submission, and ``python -m labs.grading demo --kinds solved,untouched,hostile``
writes one submission that tries the harmless-to-try ones at once, to see it with ``make grade``.
Each code is an answer cell of exercise ``NN.K`` (:data:`CLASSES`, filled in by :func:`code` with
the :class:`Targets` the test or the demo owns); what it reaches is printed, so the feedback
and the log show what the sandbox let it see.

- ``answer-key``: reads the reference notebook (``notebooks/``) or nbgrader's ``source/`` copy,
  runs the reference solution;
- ``other-submission``: finds another student's notebook (a path, or one named in the
  environment) and runs her answer;
- ``write-outside``: writes files in the machine's ``/tmp``, the project, the submissions folder;
- ``write-grades``: writes into an earlier run's ``grades/`` and any ``gradebook.db`` it finds;
- ``connect``: sends bytes to a server on the machine's loopback that is not its own;
- ``signal``: SIGKILL to a process of the machine (a pid the test owns), then to every pid it sees;
- ``memory``: takes memory 64 MB at a time until something stops it;
- ``fork``: forks sleeping children until something stops it;
- ``disk``: writes 1 MB at a time into its home until something stops it;
- ``sleep``: sleeps an hour; ``ignore-interrupt``: the same, deaf to the interrupt;
- ``print``: prints 50 MB;
- ``fake-check``: replaces ``check`` in its kernel, so the check cell passes silently (the grader wants the
  check's own verdict line).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Targets:
    """What the hostile cells aim at (owned by the test or the demo, checked from outside afterwards)."""

    answer_key: Path
    other_submission: Path
    grades_dir: Path
    submissions_dir: Path
    marker: str
    port: int
    victim_pid: int
    exercise: str
    answer_grade_id: str
    search_roots: tuple[Path, ...] = (Path("/tmp"),)  # where the grader's work folders are (course copies)


_FIND_SOLUTION = '''
def _solution_of(cells, grade_ids):
    for cell in cells:
        meta = cell.get("metadata", dict()).get("nbgrader", dict())
        source = "".join(cell.get("source", ""))
        if meta.get("grade_id") in grade_ids and "# ваш код" not in source:
            return source
    return None
'''

CLASSES: dict[str, str] = {
    "answer-key": _FIND_SOLUTION + '''
import glob, json, pathlib
found = None
copies = [p for root in {search_roots!r} for p in glob.glob(root + "/**/{answer_name}", recursive=True)]
for path in [{answer_key!r}, *copies[:20]]:
    try:
        found = _solution_of(json.loads(pathlib.Path(path).read_text())["cells"], {{{exercise!r}, {answer_grade_id!r}}})
    except Exception as exc:
        print("no key at", path, type(exc).__name__)
    if found:
        print("ANSWER KEY READ:", path)
        exec(found)
        break
''',
    "other-submission": _FIND_SOLUTION + '''
import glob, json, os, pathlib
paths = [{other_submission!r}, *glob.glob({submissions_dir!r} + "/**/*.ipynb", recursive=True)]
paths += [v for v in os.environ.values() if v.endswith(".ipynb") or "submission" in v.lower()]
for path in paths:
    try:
        found = _solution_of(json.loads(pathlib.Path(path).read_text())["cells"], {{{answer_grade_id!r}}})
    except Exception as exc:
        print("nothing at", path, type(exc).__name__)
        continue
    if found:
        print("OTHER SUBMISSION READ:", path)
        exec(found)
        break
''',
    "write-outside": '''
import pathlib
for path in ["/tmp/{marker}", "/var/tmp/{marker}", "/dev/shm/{marker}", {project_file!r}, {submissions_file!r}]:
    try:
        pathlib.Path(path).write_text("{marker}")
        print("WROTE", path)
    except Exception as exc:
        print("could not write", path, type(exc).__name__)
''',
    "write-grades": '''
import glob, pathlib, sqlite3
for path in [{grades_file!r}, {grades_new!r}]:
    try:
        pathlib.Path(path).write_text("student,score\\nme,100\\n{marker}\\n")
        print("WROTE GRADES", path)
    except Exception as exc:
        print("could not write", path, type(exc).__name__)
for db in [p for root in {search_roots!r} for p in glob.glob(root + "/**/gradebook.db", recursive=True)][:20]:
    try:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE grade SET manual_score = 100")
        print("WROTE GRADEBOOK", db)
    except Exception as exc:
        print("could not write", db, type(exc).__name__)
''',
    "connect": '''
import socket
for port in ({port}, 6390, 9390, 26390):  # the target, the lab topologies' and Prometheus' ports
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b"{marker}\\r\\n")
            print("CONNECTED", port)
    except OSError as exc:
        print("no server at", port, type(exc).__name__)
socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"{marker}")
''',
    "signal": '''
import os, signal
try:
    os.kill({victim_pid}, signal.SIGKILL)
    print("KILLED", {victim_pid})
except OSError as exc:
    print("could not kill", {victim_pid}, type(exc).__name__)
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass
''',
    "memory": '''
blocks = []
while True:
    blocks.append(bytearray(64 * 1024 * 1024))
''',
    "fork": '''
import os, time
children = 0
while children < 100_000:
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children += 1
''',
    "disk": '''
import os
chunk = b"x" * (1024 * 1024)
with open(os.path.expanduser("~/fill"), "wb") as handle:
    while True:
        handle.write(chunk)
        handle.flush()
''',
    "sleep": '''
import time
time.sleep(3600)
''',
    "ignore-interrupt": '''
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
time.sleep(3600)
''',
    "print": '''
line = "x" * 1_000_000
for _ in range(50):
    print(line)
''',
    "fake-check": '''
import labs.exercises
check = lambda *args, **kwargs: None  # the check cell below would pass without checking anything
labs.exercises.check = check
''',
}
# the ones a demo submission tries together (none of them ends its own sandbox early)
DEMO = ("answer-key", "other-submission", "write-outside", "write-grades", "connect")


def _fields(targets: Targets) -> dict[str, object]:
    return {
        "answer_key": str(targets.answer_key), "answer_name": targets.answer_key.name,
        "other_submission": str(targets.other_submission), "submissions_dir": str(targets.submissions_dir),
        "marker": targets.marker, "port": targets.port, "victim_pid": targets.victim_pid,
        "exercise": targets.exercise, "answer_grade_id": targets.answer_grade_id,
        "search_roots": tuple(str(root) for root in targets.search_roots),
        "project_file": str(targets.answer_key.parents[1] / targets.marker),
        "submissions_file": str(targets.submissions_dir / targets.marker),
        "grades_file": str(targets.grades_dir / "students.csv"),
        "grades_new": str(targets.grades_dir / f"{targets.marker}.csv"),
    }


def code(kind: str, targets: Targets) -> str:
    """The answer cell of ``kind`` aimed at ``targets``."""
    return f"# hostile: {kind}\n" + CLASSES[kind].format(**_fields(targets)).strip() + "\n"


def demo_code(targets: Targets) -> str:
    """One answer cell that tries every kind of :data:`DEMO`, each in its own ``try``."""
    parts = []
    for kind in DEMO:
        body = CLASSES[kind].format(**_fields(targets)).strip().replace("\n", "\n    ")
        parts.append(f"# hostile: {kind}\ntry:\n    {body}\n"
                     f"except Exception as exc:\n    print({kind!r}, 'stopped:', exc)")
    return "\n".join(parts) + "\n"
