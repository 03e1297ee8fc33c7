"""The class summary as one HTML page: which exercises most students failed, and with what message.

A table of exercises (most failed first) with the check's most common Russian message or
reason, then a table of students (score, time, what they lost, a link to their feedback).
Self-contained: no script, no external style.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from pathlib import Path

from labs.grading.gradebook import item_stats
from labs.grading.grader import Result

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
    "table{border-collapse:collapse;width:100%;margin-bottom:2em}"
    "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}.bad{color:#b3261e}.good{color:#17803d}"
)


def _text(text: str) -> str:
    """Escaped, with the checks' `backticked` names as <code> (as the notebook shows them)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _exercise_rows(results: Sequence[Result]) -> str:
    rows = []
    for stat in item_stats(results):
        css = "bad" if stat.failed else "good"
        times = f" (×{stat.top_reason_count})" if stat.top_reason_count else ""
        rows.append(
            f"<tr class='exercise' data-item='{html.escape(stat.item)}'><td>{html.escape(stat.part)}</td>"
            f"<td>{html.escape(stat.item)}</td><td class='{css}'>{stat.failed} / {stat.graded}</td>"
            f"<td>{stat.mean_score:.2f} / {stat.max_score:g}</td>"
            f"<td>{_text(stat.top_reason)}{times}</td></tr>"
        )
    return "".join(rows)


def _student_rows(results: Sequence[Result], out_dir: Path) -> str:
    rows = []
    for result in results:
        lost = "<br>".join(
            f"{html.escape(line.item)}: {_text(line.reason)}"
            for line in result.lines if line.score < line.max_score
        )
        links = " ".join(
            f"<a href='{html.escape(os.path.relpath(path, out_dir))}'>{html.escape(path.stem)}</a>"
            for path in result.feedback
        )
        rows.append(
            f"<tr class='student'><td>{html.escape(result.student)}</td>"
            f"<td>{result.score:g} / {result.max_score:g}</td>"
            f"<td>{result.seconds:.1f} с</td><td>{lost or '—'}</td><td>{links or '—'}</td></tr>"
        )
    return "".join(rows)


def summary_html(results: Sequence[Result], out_dir: Path, title: str = "Итоги класса") -> str:
    """The page's text; links to feedback pages are relative to ``out_dir``."""
    return (
        "<!DOCTYPE html><html lang='ru'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Работ: {len(results)}. Задания — от самых непройденных.</p>"
        "<h2>Задания</h2><table><tr><th>ноутбук / лабораторная</th><th>задание</th><th>не сдали</th>"
        "<th>средний балл</th><th>частая причина (сообщение проверки)</th></tr>"
        f"{_exercise_rows(results)}</table>"
        "<h2>Студенты</h2><table><tr><th>студент</th><th>балл</th><th>время</th><th>что потеряно и почему</th>"
        f"<th>отзыв</th></tr>{_student_rows(results, out_dir)}</table></body></html>"
    )


def write_summary(results: Sequence[Result], out_dir: Path) -> Path:
    """Write ``summary.html`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.html"
    path.write_text(summary_html(results, out_dir), encoding="utf-8")
    return path
