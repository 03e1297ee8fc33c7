"""The lab copy of the alert rules and of their promtool tests: production times divided by a scale.

``monitoring/rules/*.yml`` hold production thresholds and ``for:`` durations (minutes);
``monitoring/tests/*.yml`` test them with promtool. A notebook cannot wait five minutes for an
alert, so the lab runs a copy **generated** from the same files with every time divided by
:attr:`TimeScale.factor` (60 by default: minutes become seconds). The copy is never edited by
hand, and promtool tests both.

What is scaled, on text (comments and layout stay as they are):

- every Prometheus duration after ``for:``, ``interval:``, ``evaluation_interval:`` and
  ``eval_time:``;
- every range ``[5m]`` and ``offset 5m`` in an expression, no shorter than
  :attr:`TimeScale.min_window_s` (a ``rate`` needs a few scrapes in its window);
- on a line that ends with the marker ``# scaled``: the number after each comparison of a PromQL
  line (``> 60  # scaled``), the number of a ``value:`` line, and the numbers of a promtool
  ``values:`` series (``'0+60000x20'``: start and step are scaled, the repeat count is not).
  A marked line with nothing to scale is an error, so a misplaced marker cannot pass unseen.

Everything else (ratios, byte sizes, counts, latency thresholds of Redis itself) stays.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labs.launcher.errors import LauncherError

ROOT = Path(__file__).resolve().parents[2]
MONITORING_DIR = ROOT / "monitoring"
MARKER = "# scaled"

_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION = re.compile(r"(?:\d+(?:ms|s|m|h|d|w|y))+")
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_KEYED = re.compile(r"^(\s*(?:-\s+)?(?:for|interval|evaluation_interval|eval_time):\s*)(\S+)(.*)$")
_RANGE = re.compile(r"\[(" + _DURATION.pattern + r")\]")
_OFFSET = re.compile(r"(\boffset\s+)(" + _DURATION.pattern + r")")
_COMPARED = re.compile(r"((?:[<>]=?|[!=]=)\s*(?:bool\s+)?)(-?\d+(?:\.\d+)?)")
_VALUE = re.compile(r"^(\s*(?:-\s+)?value:\s*)(-?\d+(?:\.\d+)?)(.*)$")
_VALUES = re.compile(r"^(\s*(?:-\s+)?values:\s*)(['\"])(.*)(\2)(.*)$")
_TOKEN = re.compile(r"(-?\d+(?:\.\d+)?)(?:([+-])(\d+(?:\.\d+)?))?(x\d+)?")


@dataclass(frozen=True, kw_only=True)
class TimeScale:
    """How the lab copy relates to production: times divided by ``factor``, windows >= ``min_window_s``."""

    factor: float = 60.0
    min_window_s: float = 8.0  # 4 scrape intervals of 2 s

    def window_s(self, production_s: float) -> float:
        """A production time window in the lab: divided by ``factor``, no shorter than ``min_window_s``."""
        return max(production_s / self.factor, self.min_window_s)

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise LauncherError(f"time scale {self.factor} must be >= 1 (1 keeps the production times)")
        if self.min_window_s < 0:
            raise LauncherError(f"min_window_s {self.min_window_s} must be >= 0")


def parse_duration_s(text: str) -> float:
    """``'1h30m'`` -> 5400.0 (Prometheus duration syntax)."""
    if not _DURATION.fullmatch(text):
        raise LauncherError(f"{text!r} is not a Prometheus duration")
    return sum(int(n) * _UNITS_S[unit] for n, unit in _DURATION_PART.findall(text))


def format_duration(seconds: float) -> str:
    """5.0 -> ``'5s'``, 60.0 -> ``'1m'``, 1.5 -> ``'1500ms'``: the largest unit that is exact (whole ms)."""
    ms = round(seconds * 1000)
    for unit, size_ms in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size_ms == 0:
            return f"{ms // size_ms}{unit}"
    return f"{ms}ms" if ms else "0s"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.10g}"


_QUOTED = re.compile(r"('[^']*'|\"[^\"]*\")")


def _outside_quotes(code: str, change: Callable[[str], str]) -> str:
    """Apply ``change`` to the parts of ``code`` that are not quoted strings (summaries, test names)."""
    return "".join(part if _QUOTED.fullmatch(part) else change(part) for part in _QUOTED.split(code))


def _split_comment(line: str) -> tuple[str, str]:
    """(code, comment): the comment starts at the first ``#`` outside quotes that follows a blank."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i:]
    return line, ""


class _Scaler:
    def __init__(self, scale: TimeScale) -> None:
        self.scale = scale

    def duration(self, text: str) -> str:
        return format_duration(parse_duration_s(text) / self.scale.factor)

    def window(self, text: str) -> str:
        return format_duration(self.scale.window_s(parse_duration_s(text)))

    def windows(self, code: str) -> str:
        code = _RANGE.sub(lambda m: f"[{self.window(m[1])}]", code)
        return _OFFSET.sub(lambda m: m[1] + self.window(m[2]), code)

    def number(self, text: str) -> str:
        return _number(float(text) / self.scale.factor)

    def series_token(self, token: str) -> str:
        if token in ("_", "stale") or token.startswith("_x"):
            return token
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise LauncherError(f"cannot scale the series value {token!r}")
        start, sign, step, repeat = match.groups()
        out = self.number(start)
        if step is not None:
            out += sign + self.number(step)
        return out + (repeat or "")

    def marked(self, code: str) -> str:
        """Scale what a ``# scaled`` line holds; raise when it holds nothing to scale."""
        if match := _VALUES.match(code):
            head, quote, series, _, tail = match.groups()
            scaled = " ".join(self.series_token(t) for t in series.split())
            return f"{head}{quote}{scaled}{quote}{tail}"
        if match := _VALUE.match(code):
            return f"{match[1]}{self.number(match[2])}{match[3]}"
        scaled, n = _COMPARED.subn(lambda m: m[1] + self.number(m[2]), code)
        if n == 0:
            raise LauncherError(f"a line marked {MARKER!r} has nothing to scale: {code.strip()!r}")
        return scaled

    def line(self, line: str) -> str:
        body = line.rstrip("\r\n")
        code, comment = _split_comment(body)
        if not code.strip():
            return line
        if match := _KEYED.match(code):
            code = f"{match[1]}{self.duration(match[2])}{match[3]}"
        code = _outside_quotes(code, self.windows)
        if comment.strip() == MARKER:
            code = self.marked(code)
        return code + comment + line[len(body):]


def scale_text(text: str, scale: TimeScale) -> str:
    """The lab copy of one rules or test file (see the module docstring for what changes)."""
    scaler = _Scaler(scale)
    return "".join(scaler.line(line) for line in text.splitlines(keepends=True))


def write_lab_copy(
    out_dir: Path, scale: TimeScale, *, source: Path = MONITORING_DIR, tests: bool = False
) -> list[Path]:
    """Write ``out_dir/rules/*.yml`` (and ``out_dir/tests/*.yml``) scaled from ``source``; the paths written."""
    written: list[Path] = []
    for sub in ("rules", "tests") if tests else ("rules",):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
        for src in sorted((source / sub).glob("*.yml")):
            header = (
                f"# GENERATED from {src.relative_to(source.parent)} by labs.launcher.rule_scale "
                f"(times / {_number(scale.factor)}, windows >= {format_duration(scale.min_window_s)}): do not edit.\n"
            )
            dest = out_dir / sub / src.name
            dest.write_text(header + scale_text(src.read_text(), scale))
            written.append(dest)
    return written
