"""Bench results: rows of repeated measurements, targets, the rich table and the JSON file."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from rich.table import Table


@dataclass
class Row:
    """One line of the table: a figure measured ``len(values)`` times."""

    section: str
    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)  # per run, when each run has its own reference
    ratio: float | None = None
    ratio_of: str = ""
    target: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def ratio_quartiles(self) -> tuple[float, float] | None:
        """``(q1, q3)`` of the paired ratios: half of them lie between. None without paired ratios."""
        if not self.ratios:
            return None
        if len(self.ratios) == 1:
            return self.ratios[0], self.ratios[0]
        q1, _, q3 = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return q1, q3

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data |= {"median": self.median, "min": min(self.values, default=None), "max": max(self.values, default=None)}
        quartiles = self.ratio_quartiles
        data |= {"ratio_q1": quartiles[0] if quartiles else None, "ratio_q3": quartiles[1] if quartiles else None}
        return data


def _fmt(value: float, unit: str) -> str:
    if unit == "msgs/s":
        return f"{value:,.0f}"
    if unit == "µs":
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def table(rows: list[Row], title: str) -> Table:
    out = Table(title=title, title_justify="left")
    for col in ("section", "figure", "median", "min … max", "unit", "ratio", "ratio q1 … q3", "target", "met"):
        out.add_column(col, justify="right" if col in ("median", "ratio") else "left")
    for row in rows:
        spread = f"{_fmt(min(row.values), row.unit)} … {_fmt(max(row.values), row.unit)}" if row.values else ""
        ratio = ""
        if row.ratio is not None:
            ratio = f"{row.ratio:+.2f} s {row.ratio_of}" if row.unit == "s" else f"{row.ratio:.2f}× {row.ratio_of}"
        quartiles = row.ratio_quartiles
        iqr = f"{quartiles[0]:.2f} … {quartiles[1]:.2f}" if quartiles else ""
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: ""}[row.met]
        median = _fmt(row.median, row.unit) if row.values else row.note
        out.add_row(row.section, row.name, median, spread, row.unit, ratio, iqr, row.target, met)
    return out


PROCESS = "process"
DIAGNOSIS = "in process (diagnosis)"
DIAGNOSIS_CPU = "in process CPU (diagnosis)"


def verdicts(rows: list[Row]) -> list[str]:
    """One line per throughput target: the paired ratio, its quartiles, the target, met or not
    (the process rows, the user's figure, first; then the in-process diagnosis); then what the
    course defaults cost beside the throughput flags."""
    lines = []
    for section in (PROCESS, DIAGNOSIS):
        for row in rows:
            quartiles = row.ratio_quartiles
            if row.section != section or row.met is None or row.ratio is None or quartiles is None:
                continue
            verdict = "[green]met[/]" if row.met else "[red]NOT met[/]"
            prefix = "diagnosis: " if section == DIAGNOSIS else ""
            lines.append(f"{prefix}{row.name}: {row.ratio:.2f}× (q1 … q3 {quartiles[0]:.2f} … {quartiles[1]:.2f}, "
                         f"{len(row.ratios)} pairs), target {row.target}: {verdict}")
    return lines + price_lines(rows)


def price_lines(rows: list[Row]) -> list[str]:
    """Per process row with the course defaults: its figure beside the tuned row of the same
    dedupe and shape, and the flags that make the difference (the row's note)."""
    lines = []
    for row in rows:
        if row.section != PROCESS or not row.note or row.ratio is None:
            continue
        tuned = next((other for other in rows if other.section == PROCESS and other.target
                      and _same_run(other.name, row.name)), None)
        if tuned is None or tuned.ratio is None:
            continue
        lines.append(f"price of the defaults: {row.name}: {row.median:,.0f} msgs/s ({row.ratio:.2f}× raw) against "
                     f"{tuned.median:,.0f} msgs/s ({tuned.ratio:.2f}×) with the throughput flags: {row.note}")
    return lines


def _same_run(tuned: str, defaults: str) -> bool:
    """The same dedupe and shape (a row name is ``<consumer>, --dedupe D, <flags> · <shape>``)."""
    def key(name: str) -> tuple[str, str]:
        head, _, shape = name.partition(" · ")
        return head.split(",")[1].strip(), shape
    return key(tuned) == key(defaults)


def write_json(rows: list[Row], meta: Mapping[str, object], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"bench-{datetime.now():%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps({"meta": meta, "rows": [r.as_dict() for r in rows]}, indent=2, default=str))
    return path
