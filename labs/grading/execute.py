"""nbgrader's execute step, done in the sandbox: only the outputs come back, the scoring stays outside.

``nbgrader autograde`` runs its preprocessors in the grader's process: it restores locked cells
from the gradebook, runs the notebook, then scores the graded cells by their outputs and saves
the scores in the gradebook. :class:`SandboxedExecute` takes the place of nbgrader's ``Execute``
(``nbgrader_config.py`` of :mod:`labs.grading.course`): it hands the notebook to a sandbox
(:class:`~labs.grading.sandbox.Sandbox`, whose spec the grader writes and names in
:data:`SPEC_VAR`), and copies back only what the kernel printed, cell by cell, into nbgrader's own
copy, each output rebuilt field by field (:func:`clean_output`): the sources, the metadata, the
points and the gradebook never come from inside.

Cells the sandbox never reported (the notebook's wall limit, a report over its cap, a runner that
was killed) get an error output that says why; an error caused by a sandbox limit (memory,
processes, disk) gets the limit named after it (:func:`limit_hint`), so the feedback reads as a
reason, not a riddle.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from labs import nbtypes
from labs.grading.kernel import DEAD_KERNEL, error_output
from labs.grading.limits import Limits
from labs.grading.sandbox import RunReport, Sandbox, SandboxSpec

log = logging.getLogger(__name__)

SPEC_VAR = "LABS_GRADING_SANDBOX_SPEC"
NOT_RUN = "NotebookStopped"
STREAMS = ("stdout", "stderr")
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3", "file_extension": ".py",
                 "mimetype": "text/x-python", "codemirror_mode": {"name": "ipython", "version": 3}}


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return "".join(value)
    return None


def _mime_bundle(data: object) -> dict[str, Any]:
    bundle: dict[str, Any] = {}
    if not isinstance(data, dict):
        return bundle
    for mime, value in data.items():
        if not isinstance(mime, str) or "/" not in mime:
            continue
        if mime.endswith("json") and isinstance(value, dict | list):
            bundle[mime] = json.loads(json.dumps(value))
        elif (text := _text(value)) is not None:
            bundle[mime] = text
    return bundle


def clean_output(raw: object) -> NotebookNode | None:
    """One output from the sandbox, rebuilt from the fields nbformat allows (None: not an output)."""
    if not isinstance(raw, dict):
        return None
    kind = raw.get("output_type")
    output: NotebookNode
    if kind == "stream":
        text = _text(raw.get("text"))
        if text is None:
            return None
        name = next((s for s in STREAMS if raw.get("name") == s), "stdout")
        output = nbtypes.stream_output(name, text)
    elif kind in ("display_data", "execute_result"):
        metadata = raw.get("metadata")
        count = raw.get("execution_count")
        output = nbtypes.data_output(kind, _mime_bundle(raw.get("data")),
                                     json.loads(json.dumps(metadata)) if isinstance(metadata, dict) else {},
                                     count if isinstance(count, int) and not isinstance(count, bool) else None)
    elif kind == "error":
        traceback = raw.get("traceback")
        lines = [line for line in traceback if isinstance(line, str)] if isinstance(traceback, list) else []
        output = nbtypes.error_output(str(raw.get("ename", "")), str(raw.get("evalue", "")), lines)
    else:
        return None
    return output


# (pattern in "ename: evalue", what the feedback adds): the sandbox's limits, named where a cell met one
HINTS = (
    (re.compile(r"^MemoryError"), "память песочницы: {memory_mb} МБ"),
    (re.compile(r"Resource temporarily unavailable|^BlockingIOError: \[Errno 11\]"),
     "предел процессов песочницы: {nproc}"),
    (re.compile(r"No space left on device|Disk quota exceeded|^OSError: \[Errno 28\]"),
     "диск песочницы: {disk_mb} МБ"),
    (re.compile(r"(Connection refused|Network is unreachable|Name or service not known|"
                r"Temporary failure in name resolution)"),
     "в песочнице проверки доступен только свой Redis ($REDIS_URL), другие серверы и сеть — нет"),
    (re.compile(r"Permission denied|Read-only file system"),
     "песочница видит только свою папку, /tmp и пакеты курса"),
)


def limit_hint(output: NotebookNode, limits: Limits, report: RunReport) -> str | None:
    """The sandbox limit an error output met, as a clause for the feedback (None: none)."""
    if output.get("output_type") != "error":
        return None
    text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
    if output.get("ename") == DEAD_KERNEL and report.oom_kills:
        return f"память песочницы исчерпана: {limits.memory_mb} МБ"
    for pattern, hint in HINTS:
        if pattern.search(text):
            return hint.format(**limits.to_json())
    return None


def merge(nb: NotebookNode, reported: dict[int, dict[str, Any]], report: RunReport, limits: Limits) -> NotebookNode:
    """nbgrader's copy ``nb`` with the reported outputs; cells the sandbox did not report get the reason."""
    stopped_at: int | None = None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        found = reported.get(index)
        if found is None:
            cell.outputs = [_not_run(report, limits, first=stopped_at is None)]
            cell.execution_count = None
            stopped_at = index if stopped_at is None else stopped_at
            continue
        outputs = [out for out in map(clean_output, found.get("outputs") or []) if out is not None]
        for output in outputs:
            if (hint := limit_hint(output, limits, report)) is not None:
                output.evalue = f"{output.evalue} ({hint})"
                if output.traceback:
                    output.traceback = [*output.traceback, f"({hint})"]
        cell.outputs = outputs
        count = found.get("execution_count")
        cell.execution_count = count if isinstance(count, int) and not isinstance(count, bool) else None
    nb.metadata["language_info"] = dict(LANGUAGE_INFO)
    return nb


def _not_run(report: RunReport, limits: Limits, *, first: bool) -> NotebookNode:
    if report.timed_out:
        what = "выполнялась, когда" if first else "не выполнена:"
        return error_output(NOT_RUN, f"{what} истёк предел ноутбука ({limits.notebook_timeout_s} с)")
    note = report.limit_note(limits)
    if note:
        return error_output(NOT_RUN, f"не выполнена: {note}")
    return error_output(NOT_RUN, f"не выполнена: песочница закончилась раньше (код {report.exit_code}; "
                                 f"журнал {Path(report.log_path).name})")


def run_in_sandbox(nb: NotebookNode, name: str, spec: SandboxSpec) -> tuple[NotebookNode, RunReport]:
    """Run ``nb`` in a sandbox of ``spec``; nbgrader's copy with the outputs, and how the run went."""
    box = Sandbox(spec)
    limits = box.limits
    source = Path(spec.root) / f"{name}.ipynb"
    nbtypes.write(nb, source)
    reported: dict[int, dict[str, Any]] = {}

    def on_event(event: dict[str, Any]) -> None:
        index = event.get("index")
        if event.get("event") == "cell" and isinstance(index, int) and 0 <= index < len(nb.cells):
            reported[index] = event

    report = box.run(name, "notebook", notebook=source, wall_s=limits.notebook_timeout_s, on_event=on_event)
    source.unlink(missing_ok=True)
    (Path(spec.root) / f"report-{name}.json").write_text(json.dumps(report.to_json()), encoding="utf-8")
    return merge(nb, reported, report, limits), report


class SandboxedExecute(NbGraderPreprocessor):
    """nbgrader's execute step, in the submission's sandbox (see the module docstring)."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        spec = SandboxSpec.read(Path(os.environ[SPEC_VAR]))
        name = str(resources.get("nbgrader", {}).get("notebook") or resources.get("unique_key") or "notebook")
        nb, report = run_in_sandbox(nb, name, spec)
        log.info("sandbox for %s: exit %s in %.1f s (log %s)", name, report.exit_code, report.wall_s, report.log_path)
        return nb, resources
