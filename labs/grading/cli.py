"""``python -m labs.grading``: grade a folder of submissions with nbgrader (``make grade SUBMISSIONS=…``).

``grade DIR`` builds the course (the student release of the chosen notebooks, through
``nbgrader generate_assignment``), grades every submission in ``DIR`` (several at once, each
notebook and lab in a bubblewrap sandbox of its own: :mod:`labs.grading.grader`,
``docs/grading.md``) with a progress bar and an estimate of the time left, and writes into
``--out``: ``lines.csv`` / ``students.csv`` / ``exercises.csv``, ``summary.html``,
``feedback/<student>/<notebook>.html`` (nbgrader's ``generate_feedback``) and
``logs/<student>/`` (nbgrader's and the sandbox's log of each notebook and lab). Without bwrap it
stops with one line, unless ``--unsafe-no-sandbox`` says the instructor trusts every submission.
``demo DIR`` writes a class of generated submissions (solved, untouched, each bad kind, hostile
ones) to try it on.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path

from nbformat import NotebookNode
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from labs import nbtypes
from labs.grading import bwrap, course, demo, grader, sandbox, submissions
from labs.grading.bwrap import UidPool
from labs.grading.gradebook import write_gradebook
from labs.grading.limits import Limits, describe
from labs.grading.summary import write_summary

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
MEMORY_PER_JOB_GB = 0.8  # what a notebook's sandbox uses, measured (peak about 0.2 GB; its limit is --memory-mb)
JOBS_PER_CPU = 2  # a notebook waits as much as it computes (BLOCK, sleeps, failover timers): docs/grading.md


def default_jobs(limits: Limits | None = None) -> int:
    """Submissions graded at once: two per CPU (a class of 30 on 2 CPUs took 339 s two at a time, 237 s four at a
    time, 274 s eight at a time), fewer when memory is short (about 0.8 GB each in use, and never more than half
    the machine's available memory taken by sandboxes at their limit)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        available_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable"))
        by_memory = int(available_kb / 1e6 / MEMORY_PER_JOB_GB)
        if limits is not None:
            by_memory = min(by_memory, max(1, int(available_kb / 1024 / 2 / limits.memory_mb)))
    except (OSError, StopIteration, ValueError):
        by_memory = cpus
    return max(1, min(JOBS_PER_CPU * cpus, by_memory, bwrap.UID_BLOCK))


def pick_notebooks(spec: str, source_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """``"02,05"`` -> those reference notebooks; ``"all"`` -> every one with exercises."""
    every = sorted(source_dir.glob("*.ipynb"))
    if spec == "all":
        return every
    wanted = [part.strip() for part in spec.split(",") if part.strip()]
    picked = [path for path in every if any(path.name.startswith(f"{w}_") or path.stem == w for w in wanted)]
    if len(picked) != len(wanted):
        raise SystemExit(f"error: --notebooks {spec!r}: found {[p.name for p in picked]} in {source_dir}")
    return picked


def build(args: argparse.Namespace, work: Path, ctx: course.ChildContext) -> course.Course:
    references = pick_notebooks(args.notebooks)
    if args.small:
        references = [course.small_notebook(path, work / "small" / path.name) for path in references]
    return course.course_for(references, work / "course", ctx)


def grade_all(subs: Sequence[submissions.Submission], built: course.Course, setup: grader.Setup, jobs: int,
              console: Console, ctx: course.ChildContext) -> list[grader.Result]:
    """Every submission, ``jobs`` at a time, with a progress bar (done / all, elapsed, an estimate of what is left)."""
    results = []
    columns = (TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("left ~"), TimeRemainingColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=False) as progress, ThreadPoolExecutor(jobs) as pool:
        task = progress.add_task("", total=len(subs))
        futures = {pool.submit(grader.grade_submission, sub, built, setup, ctx): sub for sub in subs}
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            per_run = result.sandbox_start_s / max(1, result.runs)
            start = f", sandbox start {per_run:.1f} s per run" if result.runs else ""
            progress.console.print(
                f"  {result.student}: {result.score:g} / {result.max_score:g} in {result.seconds:.1f} s{start}")
            progress.update(task, advance=1, description=result.student)
    return sorted(results, key=lambda r: r.student)


def copy_feedback(results: Sequence[grader.Result], out: Path) -> None:
    for result in results:
        target = out / "feedback" / result.student
        target.mkdir(parents=True, exist_ok=True)
        result.feedback = [Path(shutil.copy2(page, target / page.name)) for page in result.feedback]


def limits_of(args: argparse.Namespace) -> Limits:
    return Limits(cell_timeout_s=args.cell_timeout_s, notebook_timeout_s=args.notebook_timeout_s,
                  lab_timeout_s=args.lab_timeout_s, memory_mb=args.memory_mb, nproc=args.nproc, disk_mb=args.disk_mb,
                  output_kb=args.output_kb)


def cmd_grade(args: argparse.Namespace) -> int:
    console = Console(stderr=False)
    if not args.unsafe_no_sandbox and (reason := bwrap.unavailable_reason()):
        console.print(f"error: cannot grade in a sandbox: {reason}. Submissions are untrusted code; to run them "
                      "unsandboxed anyway, as the grader's own user: --unsafe-no-sandbox "
                      "(make grade UNSAFE_NO_SANDBOX=1)", soft_wrap=True)
        return 2
    limits = limits_of(args)
    out = (args.out or ROOT / "grades" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")).resolve()
    work = Path(tempfile.mkdtemp(prefix="grading-", dir=args.work_dir))
    work.chmod(0o700)  # the grader's: the course copies, gradebooks and inputs (a sandbox sees only its input)
    started = time.monotonic()
    try:
        console.print(f"building the course (nbgrader generate_assignment) in {work} ...")
        ctx = grader.forkserver()
        built = build(args, work, ctx)
        subs = submissions.find_submissions(args.submissions, built.notebooks, work / "unpacked")
        if not subs:
            console.print(f"error: no submissions in {args.submissions}")
            return 1
        jobs = args.jobs or default_jobs(limits)
        contained = not args.unsafe_no_sandbox
        setup = grader.Setup(limits, work / "sandboxes", out, contained, UidPool(jobs) if contained else None)
        console.print(sandbox.mode_line(contained), soft_wrap=True)
        console.print(f"{len(subs)} submission(s), {jobs} at a time; limits: {describe(limits)}", soft_wrap=True)
        results = grade_all(subs, built, setup, jobs, console, ctx)
        copy_feedback(results, out)
        paths = write_gradebook(results, out)
        summary = write_summary(results, out)
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started
    runs = sum(r.runs for r in results)
    start = sum(r.sandbox_start_s for r in results) / runs if runs else 0.0
    console.print(f"graded {len(results)} in {elapsed:.0f} s ({jobs} at a time; a sandbox took {start:.2f} s to "
                  f"start, on average over {runs} runs): {summary}")
    for path in paths.values():
        console.print(f"  {path}")
    console.print(f"  logs: {out / 'logs'}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    references = pick_notebooks(args.notebook)
    work = Path(tempfile.mkdtemp(prefix="grading-demo-"))
    marker = f"labs-grading-hostile-{uuid.uuid4().hex[:8]}"
    try:
        notebooks = []
        for reference in references:
            small = course.small_notebook(reference, work / reference.name)
            released = nbtypes.reads(course.student_release(small))
            reference_nb = nbtypes.read(small)
            exercise = args.exercise if args.exercise and len(references) == 1 else _middle_exercise(released)
            notebooks.append(demo.DemoNotebook(small.stem, released, reference_nb, exercise))
        kinds = [k for k in args.kinds.split(",") if k]
        students = demo.make_class(args.folder, notebooks, kinds, students=args.students, lab1=args.lab1,
                                   marker=marker)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(students)} submissions in {args.folder}: {', '.join(students)}")  # noqa: T201
    # The demo's notebooks are the small release (setup and exercise cells): graded whole, they are not the
    # student edition and score nothing, so the line says how to grade them.
    stems = ",".join(nb.stem[:2] for nb in references)
    print(f"grade them: make grade SUBMISSIONS={args.folder} GRADE_NOTEBOOKS={stems} SMALL=1"  # noqa: T201
          + (" (--lab1: the lab is graded too)" if args.lab1 else ""))
    if "hostile" in kinds:
        print(f"the hostile one marks what it writes with {marker}: after make grade, "  # noqa: T201
              f"grep -rl {marker} /tmp {ROOT} {args.folder} finds nothing")
    return 0


def cmd_overhead(args: argparse.Namespace) -> int:
    from labs.grading import overhead

    if reason := bwrap.unavailable_reason():
        print(f"error: {reason}")  # noqa: T201
        return 2
    for line in overhead.main(pick_notebooks(args.notebooks), args.runs):
        print(line)  # noqa: T201
    return 0


def _middle_exercise(released: NotebookNode) -> str:
    from labs import notebook_release as release

    checks = [release.exercise_of(g) for g, kind in release.grade_ids(released).items() if kind == "check"]
    return str(checks[len(checks) // 2])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.grading", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser(
        "grade", help="grade a folder of submissions (one folder or zip per student)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Grade every submission in a folder with nbgrader's autograde. Each notebook and lab runs in a\n"
        "bubblewrap sandbox of its own: a uid, pid and network namespace, its own redis-server, only the course's\n"
        "packages and the released notebooks read-only, a tmpfs for its files, the limits below (docs/grading.md).",
        epilog="writes into --out: students.csv, exercises.csv, lines.csv, summary.html,\n"
        "feedback/<student>/<notebook>.html (nbgrader's generate_feedback, the Russian check messages in it) and\n"
        "logs/<student>/ (autograde-<notebook>.log, sandbox-<notebook>.log, feedback.log).\n"
        "example: python -m labs.grading grade ~/class/week5 --notebooks 02,05 --jobs 2",
    )
    grade.add_argument("submissions", type=Path,
                       help="<dir>/<student>/[<assignment>/]<notebook>.ipynb, or <dir>/<student>.zip")
    grade.add_argument("--notebooks", default="all", help="which notebooks the assignment is: 02,05 or all (default)")
    grade.add_argument("--small", action="store_true", help="grade only each notebook's setup cell and exercises")
    grade.add_argument("--out", type=Path, help="where the gradebook goes (default grades/<timestamp>)")
    grade.add_argument("--jobs", type=int, default=0,
                       help="submissions at once (default: two per CPU, fewer when memory is short)")
    defaults = Limits()
    limit_flags = (
        ("--cell-timeout-s", defaults.cell_timeout_s, "a cell's wall time; then it is interrupted"),
        ("--notebook-timeout-s", defaults.notebook_timeout_s, "a notebook's wall time; then its sandbox is stopped"),
        ("--lab-timeout-s", defaults.lab_timeout_s, "a lab checker's wall time"),
        ("--memory-mb", defaults.memory_mb, "a sandbox's memory, everything in it together (cgroup)"),
        ("--nproc", defaults.nproc, "a sandbox's processes and threads"),
        ("--disk-mb", defaults.disk_mb, "a sandbox's home, work folder and /tmp together (tmpfs)"),
        ("--output-kb", defaults.output_kb, "what one cell may print; the rest is dropped with a note"),
    )
    for flag, default, what in limit_flags:
        grade.add_argument(flag, type=int, default=default, help=f"{what} (default {default})")
    grade.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run every submission as the grader's own user with the machine in reach: only for a "
                            "class you trust, or to measure the sandbox's cost")
    grade.add_argument("--work-dir", type=Path, help="where the course copies go (default: a temp dir)")
    grade.add_argument("--keep-work", action="store_true", help="keep the course copies (gradebooks) afterwards")
    grade.set_defaults(run=cmd_grade)
    make = sub.add_parser("demo", help="write a class of generated submissions (solved, untouched, each bad kind, "
                          "hostile)")
    make.add_argument("folder", type=Path)
    make.add_argument("--notebook", default="05", help="the notebooks, as --notebooks: 02,05 (default 05); graded "
                      "with --small")
    make.add_argument("--students", type=int, default=0, help="this many submissions, cycling through the kinds "
                      "(default: one per kind)")
    make.add_argument("--exercise", help="the exercise each bad kind spoils (default: the middle one)")
    make.add_argument("--kinds", default=",".join(demo.KINDS), help="comma-separated (default: %(default)s)")
    make.add_argument("--lab1", action="store_true", help="add lab1.py to the solved and lab-never-exits ones")
    make.set_defaults(run=cmd_demo)
    cost = sub.add_parser("overhead", help="what the sandbox costs a notebook: the same solved notebook, sandboxed "
                          "and not, in turn")
    cost.add_argument("--notebooks", default="02,05", help="as for grade (default 02,05); their small release")
    cost.add_argument("--runs", type=int, default=6, help="runs each way per notebook (default 6)")
    cost.set_defaults(run=cmd_overhead)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    return int(args.run(args))
