"""``python -m labs.grading``: grade a folder of submissions with nbgrader (``make grade SUBMISSIONS=…``).

``grade DIR`` builds the course (the student release of the chosen notebooks, through
``nbgrader generate_assignment``), grades every submission in ``DIR`` (several at once, each in
its own sandbox: :mod:`labs.grading.grader`) with a rich progress bar, and writes into ``--out``:
``lines.csv`` / ``students.csv`` / ``exercises.csv``, ``summary.html`` and
``feedback/<student>/<notebook>.html`` (nbgrader's ``generate_feedback``). ``demo DIR`` writes a
class of generated submissions (solved, untouched and each bad kind) to try it on.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from multiprocessing.context import BaseContext
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from labs.grading import course, demo, grader, submissions
from labs.grading.gradebook import write_gradebook
from labs.grading.summary import write_summary

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
MEMORY_PER_JOB_GB = 0.8


def default_jobs() -> int:
    """Submissions graded at once: one per CPU, fewer when memory is short (about 0.8 GB each)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        available_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable"))
        by_memory = int(available_kb / 1e6 / MEMORY_PER_JOB_GB)
    except (OSError, StopIteration, ValueError):
        by_memory = cpus
    return max(1, min(cpus, by_memory))


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


def build(args: argparse.Namespace, work: Path, limits: course.Limits, ctx: BaseContext) -> course.Course:
    references = pick_notebooks(args.notebooks)
    if args.small:
        references = [course.small_notebook(path, work / "small" / path.name) for path in references]
    return course.course_for(references, work / "course", limits, ctx)


def grade_all(subs: Sequence[submissions.Submission], built: course.Course, work: Path, limits: course.Limits,
              jobs: int, console: Console, ctx: BaseContext) -> list[grader.Result]:
    results = []
    columns = (TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=False) as progress, ThreadPoolExecutor(jobs) as pool:
        task = progress.add_task("", total=len(subs))
        futures = {pool.submit(grader.grade_submission, sub, built, work / "sandboxes", limits, ctx): sub
                   for sub in subs}
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            progress.console.print(
                f"  {result.student}: {result.score:g} / {result.max_score:g} in {result.seconds:.1f} s")
            progress.update(task, advance=1, description=result.student)
    return sorted(results, key=lambda r: r.student)


def copy_feedback(results: Sequence[grader.Result], out: Path) -> None:
    for result in results:
        target = out / "feedback" / result.student
        target.mkdir(parents=True, exist_ok=True)
        result.feedback = [Path(shutil.copy2(page, target / page.name)) for page in result.feedback]


def cmd_grade(args: argparse.Namespace) -> int:
    console = Console(stderr=False)
    limits = course.Limits(cell_timeout_s=args.cell_timeout_s, notebook_timeout_s=args.notebook_timeout_s,
                           lab_timeout_s=args.lab_timeout_s)
    out = args.out or ROOT / "grades" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix="grading-", dir=args.work_dir))
    started = time.monotonic()
    try:
        console.print(f"building the course (nbgrader generate_assignment) in {work} ...")
        ctx = grader.forkserver()
        built = build(args, work, limits, ctx)
        subs = submissions.find_submissions(args.submissions, built.notebooks, work / "unpacked")
        if not subs:
            console.print(f"error: no submissions in {args.submissions}")
            return 1
        jobs = args.jobs or default_jobs()
        console.print(f"{len(subs)} submission(s), {jobs} at a time; limits: cell {limits.cell_timeout_s} s, "
                      f"notebook {limits.notebook_timeout_s} s, lab {limits.lab_timeout_s} s")
        results = grade_all(subs, built, work, limits, jobs, console, ctx)
        copy_feedback(results, out)
        paths = write_gradebook(results, out)
        summary = write_summary(results, out)
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    console.print(f"graded {len(results)} in {time.monotonic() - started:.0f} s: {summary}")
    for path in paths.values():
        console.print(f"  {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    reference = pick_notebooks(args.notebook)[0]
    work = Path(tempfile.mkdtemp(prefix="grading-demo-"))
    try:
        small = course.small_notebook(reference, work / reference.name)
        released = nbformat.reads(course.student_release(small), as_version=4)  # type: ignore[no-untyped-call]
        kinds = [k for k in args.kinds.split(",") if k]
        reference_nb = nbformat.read(str(small), as_version=4)  # type: ignore[no-untyped-call]
        exercise = args.exercise or _middle_exercise(released)
        students = demo.make_class(args.folder, small.stem, released, reference_nb, kinds, exercise, lab1=args.lab1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(students)} submissions in {args.folder}: {', '.join(students)}")  # noqa: T201
    return 0


def _middle_exercise(released: NotebookNode) -> str:
    from labs.grading import release

    checks = [release.exercise_of(g) for g, kind in release.grade_ids(released).items() if kind == "check"]
    return str(checks[len(checks) // 2])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.grading", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser(
        "grade", help="grade a folder of submissions (one folder or zip per student)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Grade every submission in a folder with nbgrader's autograde, each in a sandbox of its own\n"
        "(its own redis-server, FLUSHALL/SHUTDOWN/DEBUG refused, every process killed afterwards).",
        epilog="writes into --out: students.csv, exercises.csv, lines.csv, summary.html and\n"
        "feedback/<student>/<notebook>.html (nbgrader's generate_feedback, the Russian check messages in it).\n"
        "example: python -m labs.grading grade ~/class/week5 --notebooks 02,05 --jobs 2",
    )
    grade.add_argument("submissions", type=Path,
                       help="<dir>/<student>/[<assignment>/]<notebook>.ipynb, or <dir>/<student>.zip")
    grade.add_argument("--notebooks", default="all", help="which notebooks the assignment is: 02,05 or all (default)")
    grade.add_argument("--small", action="store_true", help="grade only each notebook's setup cell and exercises")
    grade.add_argument("--out", type=Path, help="where the gradebook goes (default grades/<timestamp>)")
    grade.add_argument("--jobs", type=int, default=0, help="submissions at once (default: as CPUs and memory allow)")
    grade.add_argument("--cell-timeout-s", type=int, default=120, help="a cell's limit (default 120)")
    grade.add_argument("--notebook-timeout-s", type=int, default=900, help="a notebook's limit (default 900)")
    grade.add_argument("--lab-timeout-s", type=int, default=600, help="a lab checker's limit (default 600)")
    grade.add_argument("--work-dir", type=Path, help="where the sandboxes go (default: a temp dir)")
    grade.add_argument("--keep-work", action="store_true", help="keep the sandboxes (nbgrader's logs) afterwards")
    grade.set_defaults(run=cmd_grade)
    make = sub.add_parser("demo", help="write a class of generated submissions (solved, untouched, each bad kind)")
    make.add_argument("folder", type=Path)
    make.add_argument("--notebook", default="05", help="the notebook (default 05); graded with --small")
    make.add_argument("--exercise", help="the exercise each bad kind spoils (default: the middle one)")
    make.add_argument("--kinds", default=",".join(demo.KINDS), help="comma-separated (default: %(default)s)")
    make.add_argument("--lab1", action="store_true", help="add lab1.py to the solved and lab-never-exits ones")
    make.set_defaults(run=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    return int(args.run(args))
