"""labs.bench.ab: its arguments, its rows, its worktrees and its summary (no server, no timing asserted)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labs.bench import ab
from labs.bench.process_runs import RAW, Drain
from labs.bench.runner import DEFAULTS_SHAPE


def test_the_defaults_and_the_base_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    args = ab.build_parser().parse_args(["--base", "5c256ac"])
    assert (args.base, args.head, args.rounds, args.events) == ("5c256ac", "HEAD", 3, 100_000)
    assert args.shapes == (DEFAULTS_SHAPE,) and not args.tuned_only
    with pytest.raises(SystemExit):
        ab.build_parser().parse_args([])
    assert "--base" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--events", "-5"], ["--shapes", "five fields"],
                                  ["--shapes", " , "]])
def test_a_bad_count_or_shape_is_refused_by_the_parser(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ab.build_parser().parse_args(["--base", "HEAD", *argv])
    assert "error:" in capsys.readouterr().err


def test_shapes_and_flags_parse() -> None:
    args = ab.build_parser().parse_args(["--base", "a", "--head", "b", "--rounds", "6", "--events", "5000",
                                         "--shapes", "four fields, +5 fields", "--tuned-only"])
    assert (args.head, args.rounds, args.events, args.shapes, args.tuned_only) == (
        "b", 6, 5000, ("four fields", "+5 fields"), True)


def test_the_rows_are_make_bench_s_process_rows() -> None:
    """On the producer's shape the tuned workers and the course defaults; on another shape the tuned ones."""
    on_defaults = ab.consumers(DEFAULTS_SHAPE)
    assert [(c.dedupe, bool(c.flags)) for c in on_defaults] == [("none", True), ("sqlite", True),
                                                                ("none", False), ("sqlite", False)]
    assert [c.dedupe for c in ab.consumers("+5 fields")] == ["none", "sqlite"]
    assert ab.consumers(DEFAULTS_SHAPE, tuned_only=True) == ab.consumers("+5 fields")
    assert RAW not in on_defaults  # the raw loop is each round's control, not a row


def test_an_unknown_base_is_an_error_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab.main(["--base", "no-such-commit-anywhere"]) == 2
    assert "no commit 'no-such-commit-anywhere'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no commit"):
        ab.resolve("no-such-commit-anywhere")
    assert len(ab.resolve("HEAD")) == 40


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_a_worktree_holds_the_commit_and_is_removed_after(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "marker.txt").write_text("first")
    _git(repo, "add", "marker.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    first = ab.resolve("HEAD", repo)
    (repo / "marker.txt").write_text("second")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "second")
    with ab.worktree(first, tmp_path, "A", repo) as tree:
        assert (tree / "marker.txt").read_text() == "first"
        assert str(tree) in _git(repo, "worktree", "list")
    assert not tree.exists()
    assert str(tree) not in _git(repo, "worktree", "list")


def _pair(rnd: int, a: float, b: float, a_cpu: float | None, b_cpu: float | None, load: float) -> ab.Pair:
    return ab.Pair(rnd, "four fields", "worker", Drain(a, a_cpu), Drain(b, b_cpu), Drain(100.0), load)


def test_the_summary_gives_medians_paired_ratios_and_their_spread() -> None:
    pairs = [_pair(0, 100.0, 110.0, 10.0, 9.0, 3.0), _pair(1, 200.0, 180.0, 5.0, 5.0, 7.5),
             _pair(2, 150.0, 150.0, None, 6.0, 11.04)]
    (row,) = ab.summary(pairs)
    assert row["row"] == "worker · four fields" and row["pairs"] == 3
    assert (row["a_rate"], row["b_rate"]) == (150.0, 150.0)
    assert row["ratio"] == pytest.approx(1.0) and row["ratio_min"] == pytest.approx(0.9)
    assert row["ratio_max"] == pytest.approx(1.1)
    assert row["cpu_ratio"] == pytest.approx((0.9 + 1.0) / 2)  # the pair without A's CPU figure is left out
    assert (row["cpu_ratio_min"], row["cpu_ratio_max"]) == (pytest.approx(0.9), pytest.approx(1.0))
    assert row["loads"] == [3.0, 7.5, 11.0] and row["raw_rate"] == 100.0
    assert ab.table([row], "t").row_count == 1
