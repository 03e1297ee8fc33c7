"""The report writer: three files in a timestamped folder; the HTML opens offline."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import plotly.graph_objects as go
from rich.console import Console

from labs.report import Check, Report, Table, print_checks, print_report, write_report


def _report() -> Report:
    report = Report("demo", "Demo report", created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    report.checks = [Check("a | b", True, "fine"), Check("c", False, "broken <b>")]
    report.tables = [Table("numbers", ("name", "value"), (("x", 1.23456), ("nan", float("nan"))))]
    report.figures = [("bars", go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))), ("line", go.Figure(go.Scatter(y=[3, 4])))]
    report.notes = ["a note"]
    report.data = {"value": float("nan"), "check": Check("x", True, "y"), "path": Path("/tmp")}
    return report


def test_write_report_creates_three_files(tmp_path: Path) -> None:
    paths = write_report(_report(), tmp_path)
    assert paths.folder.name == "demo-20260102-030405"
    assert {p.name for p in paths.folder.iterdir()} == {"report.json", "report.md", "report.html"}
    data = json.loads(paths.json.read_text())
    assert data["passed"] is False
    assert data["data"] == {"value": None, "check": {"name": "x", "passed": True, "detail": "y"}, "path": "/tmp"}
    assert data["tables"][0]["rows"][1] == ["nan", None]
    md = paths.markdown.read_text()
    assert "| a \\| b | PASS | fine |" in md and "| c | FAIL | broken <b> |" in md
    assert "| x | 1.23 |" in md


def test_html_embeds_plotly_once_and_every_figure(tmp_path: Path) -> None:
    html = write_report(_report(), tmp_path).html.read_text()
    assert len(re.findall(r'class="plotly-graph-div"', html)) == 2
    assert html.count("Plotly.newPlot") == 2
    assert "plotly.js v" in html  # the library itself, inline: opens without a network
    assert "broken &lt;b&gt;" in html and "<td class='fail'>FAIL</td>" in html


def test_same_timestamp_gets_a_new_folder(tmp_path: Path) -> None:
    first = write_report(_report(), tmp_path).folder
    second = write_report(_report(), tmp_path).folder
    assert first != second and second.name == "demo-20260102-030405-2"


def test_print_report_cuts_long_tables() -> None:
    report = Report("t", "Long")
    report.tables = [Table("many", ("i",), tuple((i,) for i in range(30)))]
    console = Console(record=True, width=100)
    print_report(console, report, max_rows=5)
    text = console.export_text()
    assert "25 more rows" in text and "29" not in text.split("many")[1].split("more rows")[0]


def test_print_checks_prints_each_verdict_and_returns_the_exit_code() -> None:
    console = Console(record=True, width=100)
    assert print_checks(console, [Check("a [b]", True, "fine"), Check("c", False, "broken")]) == 1
    lines = console.export_text().splitlines()
    assert lines == ["PASS  a [b]", "      fine", "FAIL  c", "      broken", "1 passed, 1 failed"]
    assert print_checks(Console(record=True), [Check("a", True, "ok")]) == 0
    assert print_checks(Console(record=True), []) == 0
