"""Hostile submissions, one per kind of harm, graded in one run with a solved and a blank one.

Notebook 05 cut to its setup cell and exercise 05.1 is the course; each hostile submission is the
solved one with the answer cell of 05.1 replaced by one attempt of :mod:`labs.grading.hostile` (read
the answer key, read a classmate's work, write outside its folder, write into the grades, reach a
server of the machine, kill a process of the machine, take all memory, fork without end, fill the
disk, sleep past the limit, ignore the interrupt, print 50 MB, replace ``check`` in its kernel). All
of them are graded at once (``JOBS`` at a time, small limits), as ``make grade`` would, in the
bubblewrap sandbox. Then, from outside: every hostile one has zero for 05.1 with a reason that names
the limit it met, the harm did not happen (the files are not there, the listener got nothing, the
process lives, the earlier grades are as they were), the solved submission has its full score, and
nothing of any sandbox is left.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grading_support
import pytest

from labs import notebook_release as release
from labs.grading import bwrap, cgroup, demo, grader, hostile
from labs.grading.limits import Limits

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
NAME = grading_support.NAME
EXERCISE = "05.1"
LIMITS = Limits(cell_timeout_s=20, notebook_timeout_s=180, lab_timeout_s=60, memory_mb=512, nproc=160, disk_mb=64,
                output_kb=256)
JOBS = 4
EARLIER_GRADES = "student,score,max_score\nann,3,3\n"


CONTROL = ("answer-key", "other-submission", "connect")  # graded again unsandboxed: the attempts do work there


@dataclass
class HostileRun:
    tmp: Path
    targets: hostile.Targets
    setup: grader.Setup
    results: dict[str, grader.Result]
    received: list[bytes]
    victim: subprocess.Popen[bytes]
    earlier: Path
    snapshot: dict[str, bytes] = field(default_factory=dict)
    control: dict[str, grader.Result] = field(default_factory=dict)
    control_received: list[bytes] = field(default_factory=list)


def _listen() -> tuple[socket.socket, list[bytes]]:
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(1024) or b"<connected>")
                except OSError:
                    received.append(b"<connected>")

    threading.Thread(target=serve, daemon=True).start()
    return server, received


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileRun]:
    if reason := bwrap.unavailable_reason():
        pytest.fail(f"the grading sandbox must work where the suite runs (as root): {reason}")
    tmp = tmp_path_factory.mktemp("hostile")
    built, ctx, reference = grading_support.build_course(tmp, exercises={EXERCISE})
    released = built.released(NAME)
    folder = tmp / "submissions"
    demo.write_submission(folder, "solved", NAME, demo.solved(released, reference))
    demo.write_submission(folder, "untouched", NAME, released)
    earlier = tmp / "grades" / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "students.csv").write_text(EARLIER_GRADES, encoding="utf-8")
    server, received = _listen()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"])
    targets = hostile.Targets(
        answer_key=ROOT / "notebooks" / f"{NAME}.ipynb",
        other_submission=folder / "solved" / "workbook" / f"{NAME}.ipynb", grades_dir=earlier,
        submissions_dir=folder, marker=f"hostile-{uuid.uuid4().hex[:8]}",
        port=server.getsockname()[1], victim_pid=victim.pid, exercise=EXERCISE,
        answer_grade_id=release.ANSWER_PREFIX + release.safe_id(EXERCISE), search_roots=(tmp,))
    for kind in hostile.CLASSES:
        nb = demo.spoil_answer(demo.solved(released, reference), EXERCISE, hostile.code(kind, targets))
        demo.write_submission(folder, f"hostile-{kind}", NAME, nb)
    control_server, control_received = _listen()
    control_folder = tmp / "control"
    control_targets = dataclasses.replace(targets, port=control_server.getsockname()[1], submissions_dir=control_folder,
                                          other_submission=targets.other_submission)
    for kind in CONTROL:
        nb = demo.spoil_answer(demo.solved(released, reference), EXERCISE, hostile.code(kind, control_targets))
        demo.write_submission(control_folder, f"control-{kind}", NAME, nb)
    snapshot = {str(path): path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    setup = grading_support.setup_for(tmp, LIMITS, JOBS)
    unsafe = grading_support.setup_for(tmp / "unsafe", LIMITS, 2, contained=False)
    try:
        with ThreadPoolExecutor(2) as pool:
            control = pool.submit(grading_support.grade_folder, tmp / "unsafe", built, ctx, control_folder, unsafe, 2)
            results = grading_support.grade_folder(tmp, built, ctx, folder, setup, JOBS)
        for student, result in sorted(results.items()):  # shown with -s: where a slow run spent its time
            print(f"{student}: {result.seconds:.1f} s, sandbox {result.walls}, start {result.sandbox_start_s:.1f} s")
        yield HostileRun(tmp, targets, setup, results, received, victim, earlier, snapshot, control.result(),
                         control_received)
    finally:
        victim.kill()
        server.close()
        control_server.close()


def line(run: HostileRun, student: str) -> grader.Line:
    (found,) = [item for item in run.results[student].lines if item.part == NAME and item.item == EXERCISE]
    return found


def autograded(run: HostileRun, student: str, work_dir: Path | None = None) -> str:
    """What the notebook nbgrader scored printed (came back from the sandbox), as text: the attempts' own lines."""
    path = (work_dir or run.setup.work_dir) / student / "course" / "autograded" / student / "workbook" / f"{NAME}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    streams = [out for cell in cells for out in cell.get("outputs", []) if out.get("output_type") == "stream"]
    return "".join("".join(out["text"]) if isinstance(out["text"], list) else out["text"] for out in streams)


def test_the_solved_submission_keeps_its_full_score_and_the_blank_one_gets_none(run: HostileRun) -> None:
    solved, blank = run.results["solved"], run.results["untouched"]
    assert solved.score == solved.max_score == release.POINTS_PER_CHECK, solved.lines
    assert blank.score == 0.0 and "пока не определен" in line(run, "untouched").reason


@pytest.mark.parametrize("kind", list(hostile.CLASSES))
def test_a_hostile_submission_gets_nothing_for_what_it_tried(run: HostileRun, kind: str) -> None:
    found = line(run, f"hostile-{kind}")
    assert found.score == 0.0 and found.reason, found
    assert run.results[f"hostile-{kind}"].feedback, "every graded submission gets its feedback page"


def test_the_attempts_work_without_the_sandbox(run: HostileRun) -> None:
    """The control: graded with --unsafe-no-sandbox, the same cells read the key and the classmate and score,
    and reach the machine's listener; so the zeros above are the sandbox's doing, not a broken attempt."""
    for kind in ("answer-key", "other-submission"):
        result = run.control[f"control-{kind}"]
        assert result.score == result.max_score == release.POINTS_PER_CHECK, (kind, result.lines)
    assert run.control_received, "the unsandboxed attempt did not reach the listener"


def test_the_answer_key_and_the_classmate_were_out_of_reach(run: HostileRun) -> None:
    key, other = autograded(run, "hostile-answer-key"), autograded(run, "hostile-other-submission")
    assert "ANSWER KEY READ" not in key and "OTHER SUBMISSION READ" not in other
    assert "nothing at" in other


def test_nothing_was_written_outside_the_sandbox(run: HostileRun) -> None:
    marker = run.targets.marker
    for path in (Path("/tmp") / marker, Path("/var/tmp") / marker, Path("/dev/shm") / marker, ROOT / marker,
                 run.targets.submissions_dir / marker, run.earlier / f"{marker}.csv"):
        assert not path.exists(), f"a submission wrote {path}"
    assert "could not write" in autograded(run, "hostile-write-outside")
    now = {str(path): path.read_bytes() for path in run.targets.submissions_dir.rglob("*") if path.is_file()}
    assert now == run.snapshot, "the submissions folder changed while it was graded"


def test_the_grades_of_an_earlier_run_and_of_this_one_are_untouched(run: HostileRun) -> None:
    assert (run.earlier / "students.csv").read_text(encoding="utf-8") == EARLIER_GRADES
    text = autograded(run, "hostile-write-grades")
    assert "WROTE GRADES" not in text and "WROTE GRADEBOOK" not in text
    for student, result in run.results.items():  # every gradebook says what the outputs earned, nothing else
        expected = release.POINTS_PER_CHECK if student == "solved" else 0.0
        assert result.score == expected, (student, result.lines)


def test_no_server_of_the_machine_was_reached(run: HostileRun) -> None:
    assert run.received == [], f"the machine's listener got {run.received}"
    assert "CONNECTED" not in autograded(run, "hostile-connect")


def test_a_process_of_the_machine_survived_every_signal(run: HostileRun) -> None:
    assert run.victim.poll() is None, "the grader's machine lost a process to a submission"


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("memory", "памят"),
        ("fork", f"предел процессов песочницы: {LIMITS.nproc}"),
        ("disk", f"диск песочницы: {LIMITS.disk_mb} МБ"),
        ("sleep", f"ячейка не закончилась за {LIMITS.cell_timeout_s} с"),
        ("ignore-interrupt", f"ячейка не закончилась за {LIMITS.cell_timeout_s} с"),
        ("print", f"вывод ячейки больше {LIMITS.output_kb} КБ"),
        ("signal", "песочница закончилась раньше"),
        ("fake-check", "проверка не показала своего вердикта"),
    ],
)
def test_a_runaway_cell_meets_a_limit_the_feedback_names(run: HostileRun, kind: str, said: str) -> None:
    reason = line(run, f"hostile-{kind}").reason
    assert said in reason, reason


def test_a_flood_of_output_stays_small_in_the_grades_and_logs(run: HostileRun) -> None:
    result = run.results["hostile-print"]
    assert len(autograded(run, "hostile-print")) < 4 * LIMITS.output_kb * 1024
    assert all(page.stat().st_size < 4 * LIMITS.output_kb * 1024 for page in result.feedback)
    assert result.log_dir is not None
    assert all(log.stat().st_size < 2 * 1024 * 1024 for log in result.log_dir.iterdir())


def test_logs_are_kept_in_the_output_folder_for_every_submission(run: HostileRun) -> None:
    for student, result in run.results.items():
        assert result.log_dir is not None and result.log_dir.is_relative_to(run.setup.out_dir), student
        names = {path.name for path in result.log_dir.iterdir()}
        assert {f"autograde-{NAME}.log", f"sandbox-{NAME}.log", "feedback.log"} <= names, (student, names)
    sandbox_log = (run.results["hostile-memory"].log_dir or Path()) / f"sandbox-{NAME}.log"
    assert "limits: cell 20 s" in sandbox_log.read_text(encoding="utf-8")


def test_nothing_of_any_sandbox_is_left(run: HostileRun) -> None:
    assert run.setup.uids is not None
    uids = run.setup.uids.uids
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid in uids:
                left.append(entry.name)
        except OSError:
            continue
    assert not left, f"processes of the sandboxes' uids left: {left}"
    layout = cgroup.available()
    if layout is not None:
        mine = [path.name for path in layout.memory.iterdir() if path.name.startswith(tuple(f"uid{u}-" for u in uids))]
        assert not mine, f"cgroups left: {mine}"
    reports = [json.loads(path.read_text()) for path in run.setup.work_dir.glob("*/sandbox/report-*.json")]
    assert len(reports) == len(run.results) and all(r["contained"] for r in reports)
