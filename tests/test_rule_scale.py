"""labs.launcher.rule_scale: the lab copy of rules and tests is the production text with times divided."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.launcher.errors import LauncherError
from labs.launcher.rule_scale import (
    MONITORING_DIR,
    TimeScale,
    format_duration,
    parse_duration_s,
    scale_text,
    write_lab_copy,
)

LAB = TimeScale()  # / 60, windows >= 8 s


@pytest.mark.parametrize(
    ("text", "seconds"), [("5m", 300), ("1h30m", 5400), ("500ms", 0.5), ("2h", 7200), ("30s", 30)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(("seconds", "text"), [(5.0, "5s"), (1.5, "1500ms"), (0.0, "0s"), (60.0, "1m"), (90.0, "90s")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_for_and_test_timings_are_divided_without_a_floor() -> None:
    src = "    for: 5m\n  - eval_time: 10m\n    interval: 1m\nevaluation_interval: 1m\n        for: 0s\n"
    expected = "    for: 5s\n  - eval_time: 10s\n    interval: 1s\nevaluation_interval: 1s\n        for: 0s\n"
    assert scale_text(src, LAB) == expected


def test_ranges_and_offsets_are_divided_but_never_shorter_than_the_min_window() -> None:
    src = "expr: increase(x[5m]) > 0 or (y unless y offset 5m) and z[1h]\n"
    assert scale_text(src, LAB) == "expr: increase(x[8s]) > 0 or (y unless y offset 8s) and z[1m]\n"


def test_a_window_given_in_seconds_is_scaled_like_a_range_in_a_rule() -> None:
    assert TimeScale(factor=60).window_s(300) == 8.0  # 5 s, raised to the 8 s floor
    assert TimeScale(factor=10).window_s(300) == 30.0
    assert TimeScale(factor=1, min_window_s=0).window_s(300) == 300.0


def test_only_marked_lines_scale_their_numbers() -> None:
    src = (
        "expr: a > 60  # scaled\n"
        "expr: b > 0.8\n"
        "          time() - c < 300  # scaled\n"
        "        values: '0+60000x20 _ stale 120x3'  # scaled\n"
        "            value: 540  # scaled\n"
        "        values: '0+60x20'\n"
    )
    assert scale_text(src, LAB) == (
        "expr: a > 1  # scaled\n"
        "expr: b > 0.8\n"
        "          time() - c < 5  # scaled\n"
        "        values: '0+1000x20 _ stale 2x3'  # scaled\n"
        "            value: 9  # scaled\n"
        "        values: '0+60x20'\n"
    )


def test_comments_and_strings_are_left_alone() -> None:
    src = "# for: 5m and [5m] in prose\n      summary: \"behind for 5m [5m] # not a comment\"\n"
    assert scale_text(src, LAB) == src


def test_a_marked_line_with_nothing_to_scale_is_an_error() -> None:
    with pytest.raises(LauncherError, match="nothing to scale"):
        scale_text("expr: rate(x[5m])  # scaled\n", LAB)


def test_scale_one_is_the_production_text() -> None:
    text = (MONITORING_DIR / "rules" / "streams.yml").read_text()
    assert scale_text(text, TimeScale(factor=1, min_window_s=0)) == text


def test_bad_scales_are_refused() -> None:
    with pytest.raises(LauncherError):
        TimeScale(factor=0.5)
    with pytest.raises(LauncherError):
        TimeScale(min_window_s=-1)


def test_the_lab_copy_is_generated_with_a_header_and_the_same_files(tmp_path: Path) -> None:
    written = write_lab_copy(tmp_path, LAB, tests=True)
    sources = sorted((MONITORING_DIR / "rules").glob("*.yml")) + sorted((MONITORING_DIR / "tests").glob("*.yml"))
    assert [p.name for p in written] == [p.name for p in sources]
    for copy in written:
        assert copy.read_text().startswith("# GENERATED from monitoring/")
    streams = (tmp_path / "rules" / "streams.yml").read_text()
    assert "expr: stream_group:lag_seconds > 1  # scaled" in streams
    assert "for: 5s" in streams and "for: 5m" not in streams
