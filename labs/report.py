"""Lab reports: one structure, written as ``report.json``, ``report.md`` and ``report.html``.

A runner fills a :class:`Report` (checks, tables, plotly figures, notes and the raw data)
and calls :func:`write_report`, which creates ``reports/<name>-<timestamp>/``. The HTML page
embeds plotly's JavaScript inline, so it opens offline. :func:`print_report` shows the same
checks and tables in the terminal with rich; :func:`print_checks` prints a checker's PASS/FAIL
lines and returns its exit code. Lab 1, lab 3 and the benchmark share it.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

ROOT = Path(__file__).resolve().parents[1]
PIPE_WIDTH = 320  # piped or redirected output: tables this wide, long lines never wrapped
REPORTS_DIR_VAR = "LAB_REPORTS_DIR"
CHECK_COLUMNS = ("check", "result", "detail")

CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: left; }
th { background: #f3f3f3; }
.pass { color: #17803d; font-weight: bold; } .fail { color: #c0262d; font-weight: bold; }
"""


@dataclass(frozen=True)
class Check:
    """One verdict of a lab: its name, whether it passed, and why (the figures behind it)."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Table:
    """A titled table of plain values (numbers and strings)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]


@dataclass
class Report:
    """Everything one run reports. ``data`` holds the raw figures (JSON-able, dataclasses allowed)."""

    name: str
    title: str
    checks: list[Check] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, Figure]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, object] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


@dataclass(frozen=True)
class ReportPaths:
    folder: Path
    json: Path
    markdown: Path
    html: Path


def default_reports_dir() -> Path:
    """``$LAB_REPORTS_DIR``, else ``reports/`` at the repository root."""
    env = os.environ.get(REPORTS_DIR_VAR)
    return Path(env) if env else ROOT / "reports"


def jsonable(value: Any) -> Any:
    """Dataclasses, paths, datetimes and tuples as JSON values; NaN and infinities as null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Path | datetime):
        return str(value)
    return value


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if math.isfinite(value) else "-"
    return "-" if value is None else str(value)


def _verdict(check: Check) -> str:
    return "PASS" if check.passed else "FAIL"


def to_json(report: Report) -> str:
    payload = {
        "name": report.name,
        "title": report.title,
        "created_at": report.created_at.isoformat(),
        "passed": report.passed,
        "checks": report.checks,
        "tables": [{"title": t.title, "columns": t.columns, "rows": t.rows} for t in report.tables],
        "figures": [caption for caption, _ in report.figures],
        "notes": report.notes,
        "data": report.data,
    }
    return json.dumps(jsonable(payload), indent=2, ensure_ascii=False) + "\n"


def _md_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    def cell(value: object) -> str:
        return _fmt(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def to_markdown(report: Report) -> str:
    lines = [f"# {report.title}", "", f"Run at {report.created_at:%Y-%m-%d %H:%M:%S} UTC.", ""]
    if report.checks:
        verdict = "all checks passed" if report.passed else "some checks FAILED"
        lines += [f"## Checks: {verdict}", ""]
        lines += _md_table(CHECK_COLUMNS, [(c.name, _verdict(c), c.detail) for c in report.checks])
    for table in report.tables:
        lines += [f"## {table.title}", "", *_md_table(table.columns, table.rows)]
    if report.notes:
        lines += ["## Notes", "", *[f"- {note}" for note in report.notes], ""]
    if report.figures:
        captions = "; ".join(caption for caption, _ in report.figures)
        lines += [f"Charts: {captions} (see report.html).", ""]
    return "\n".join(lines)


def _html_cell(value: object) -> str:
    text = _fmt(value)
    css = {"PASS": " class='pass'", "FAIL": " class='fail'"}.get(text, "")
    return f"<td{css}>{html.escape(text)}</td>"


def _html_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_html_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(report: Report) -> str:
    when = f"<p>Run at {report.created_at:%Y-%m-%d %H:%M:%S} UTC.</p>"
    parts = [f"<h1>{html.escape(report.title)}</h1>", when]
    if report.checks:
        rows = [(c.name, _verdict(c), c.detail) for c in report.checks]
        parts.append(f"<h2>Checks</h2>{_html_table(CHECK_COLUMNS, rows)}")
    for table in report.tables:
        parts.append(f"<h2>{html.escape(table.title)}</h2>{_html_table(table.columns, table.rows)}")
    for i, (caption, figure) in enumerate(report.figures):
        div = figure.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        parts.append(f"<h2>{html.escape(caption)}</h2>{div}")
    if report.notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
        parts.append(f"<h2>Notes</h2><ul>{items}</ul>")
    body = "\n".join(parts)
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(report.title)}</title>"
        f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )


def write_report(report: Report, reports_dir: Path | None = None) -> ReportPaths:
    """Write the three files into a new ``<reports_dir>/<name>-<timestamp>/`` and return their paths."""
    base = reports_dir or default_reports_dir()
    stamp = report.created_at.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    folder = base / f"{report.name}-{stamp}"
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = base / f"{report.name}-{stamp}-{suffix}"
    folder.mkdir(parents=True)
    paths = ReportPaths(folder, folder / "report.json", folder / "report.md", folder / "report.html")
    paths.json.write_text(to_json(report), encoding="utf-8")
    paths.markdown.write_text(to_markdown(report), encoding="utf-8")
    paths.html.write_text(to_html(report), encoding="utf-8")
    return paths


def make_console() -> Console:
    """A rich console for a lab's output: a terminal's own width; piped or redirected (``| tee``, CI),
    no wrapping at 80 columns, so a check's reason and a table's rows stay one line each."""
    console = Console(highlight=False)
    if console.is_terminal:
        return console
    return Console(highlight=False, width=PIPE_WIDTH, soft_wrap=True)


def left_running(console: Console, topology: str, url: str | None = None) -> None:
    """Say that the lab's topology stays up after the run (the next run reuses it) and how to stop it."""
    where = f" for you to inspect (redis-cli -u {url})" if url else " for you to inspect (make status)"
    console.print(f"the {topology} topology keeps running{where}; 'make down' stops it")


def print_report(console: Console, report: Report, *, max_rows: int = 20) -> None:
    """The checks and tables as rich tables in the terminal (long tables cut to ``max_rows``)."""
    if report.checks:
        checks = RichTable(title=f"{report.title}: checks", title_justify="left")
        for column in ("check", "result", "detail"):
            checks.add_column(column, overflow="fold")
        for c in report.checks:
            style = "bold green" if c.passed else "bold red"
            checks.add_row(escape(c.name), f"[{style}]{_verdict(c)}[/]", escape(c.detail))
        console.print(checks)
    for table in report.tables:
        shown = RichTable(title=table.title, title_justify="left")
        for column in table.columns:
            shown.add_column(column, overflow="fold")
        for row in table.rows[:max_rows]:
            shown.add_row(*(escape(_fmt(v)) for v in row))
        console.print(shown)
        if len(table.rows) > max_rows:
            console.print(f"({len(table.rows) - max_rows} more rows in the report files)")


def print_checks(console: Console, checks: Sequence[Check]) -> int:
    """A checker's verdicts, one ``PASS``/``FAIL`` line each with its reason, and a count line.

    Returns the checker's exit code: 0 when every check passed, 1 otherwise.
    """
    for check in checks:
        style = "bold green" if check.passed else "bold red"
        console.print(f"[{style}]{_verdict(check)}[/]  {escape(check.name)}\n      {escape(check.detail)}",
                      soft_wrap=True)
    failed = sum(not c.passed for c in checks)
    console.print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0
