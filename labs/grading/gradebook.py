"""The class's gradebook as CSV: one file per student (``students.csv``) and per exercise (``exercises.csv``).

``lines.csv`` holds every line (student, part, item, score, max, reason, the check's message);
``students.csv`` one row per student (total, maximum, percent, seconds it took, feedback pages,
the folder of its logs); ``exercises.csv`` one row per exercise or lab check (how many passed,
the mean score, the most common reason for a loss). All UTF-8 with a header, ready for a
spreadsheet.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labs.grading.grader import Line, Result


@dataclass(frozen=True)
class ItemStats:
    """How the class did on one exercise or lab check."""

    part: str
    item: str
    passed: int
    graded: int
    mean_score: float
    max_score: float
    top_reason: str
    top_reason_count: int

    @property
    def failed(self) -> int:
        return self.graded - self.passed


def item_stats(results: Sequence[Result]) -> list[ItemStats]:
    """Per exercise (and lab check), most failed first."""
    by_item: dict[tuple[str, str], list[Line]] = defaultdict(list)
    for result in results:
        for line in result.lines:
            by_item[(line.part, line.item)].append(line)
    stats = []
    for (part, item), lines in by_item.items():
        reasons = Counter(line.reason for line in lines if line.score < line.max_score and line.reason)
        top, count = reasons.most_common(1)[0] if reasons else ("", 0)
        stats.append(ItemStats(part, item, sum(line.score >= line.max_score for line in lines), len(lines),
                               sum(line.score for line in lines) / len(lines), max(line.max_score for line in lines),
                               top, count))
    return sorted(stats, key=lambda s: (-s.failed, s.part, s.item))


def write_gradebook(results: Sequence[Result], out_dir: Path) -> dict[str, Path]:
    """Write ``lines.csv``, ``students.csv`` and ``exercises.csv`` into ``out_dir``; their paths by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / f"{name}.csv" for name in ("lines", "students", "exercises")}
    with paths["lines"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "part", "item", "score", "max_score", "reason", "message"])
        for result in results:
            for line in result.lines:
                writer.writerow([line.student, line.part, line.item, f"{line.score:g}", f"{line.max_score:g}",
                                 line.reason, line.message])
    with paths["students"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "score", "max_score", "percent", "seconds", "lost", "notes", "feedback", "logs"])
        for result in results:
            lost = "; ".join(f"{line.item}: {line.reason}" for line in result.lines if line.score < line.max_score)
            percent = 100.0 * result.score / result.max_score if result.max_score else 0.0
            writer.writerow([result.student, f"{result.score:g}", f"{result.max_score:g}", f"{percent:.0f}",
                             f"{result.seconds:.1f}", lost, "; ".join(result.notes),
                             " ".join(str(path) for path in result.feedback), result.log_dir or ""])
    with paths["exercises"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["part", "item", "passed", "failed", "graded", "mean_score", "max_score", "top_reason",
                         "top_reason_count"])
        for stat in item_stats(results):
            writer.writerow([stat.part, stat.item, stat.passed, stat.failed, stat.graded, f"{stat.mean_score:.2f}",
                             f"{stat.max_score:g}", stat.top_reason, stat.top_reason_count])
    return paths
