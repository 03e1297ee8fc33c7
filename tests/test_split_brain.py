"""labs.experiments.split_brain (and partition_writes): acknowledged writes lost to a Sentinel split brain.

One run of the three guards side by side (about 25 s): semantics with margins, never exact timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from netns_support import own_namespaces, skip_without_netns

from labs.experiments import split_brain

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

PARTITION_S = 7.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[split_brain.SplitBrainRun]:
    skip_without_netns()
    before = own_namespaces()
    done = split_brain.run_guards(Path(tmp_path_factory.mktemp("split-brain")), partition_s=PARTITION_S)
    left = own_namespaces() - before
    assert not left, f"a run left network namespaces behind: {sorted(left)}"
    return done


def test_without_the_guard_the_old_master_acknowledges_until_it_is_demoted(
    runs: list[split_brain.SplitBrainRun],
) -> None:
    unguarded = runs[0]
    assert unguarded.guard.min_replicas == 0
    assert unguarded.promoted_s < PARTITION_S, "the sentinels promoted the replica during the partition"
    assert unguarded.window_s >= unguarded.healed_s, "writes were acknowledged until (and after) the heal"
    after_cut = len(unguarded.isolated.acked_after(0.0))
    assert unguarded.isolated.lost > 0.8 * after_cut, "almost every write acknowledged after the cut was lost"


@pytest.mark.parametrize("index", [1, 2])
def test_min_replicas_to_write_bounds_the_window_by_its_lag(runs: list[split_brain.SplitBrainRun], index: int) -> None:
    run = runs[index]
    lag_s = run.guard.max_lag_s
    assert run.guard.min_replicas == 1
    assert run.isolated.lost > 0, "the guard bounds the window, it does not close it"
    assert lag_s - 1.0 <= run.window_s <= lag_s + 3.5, f"window {run.window_s:.2f} s against max-lag {lag_s} s"
    assert run.isolated.lost < runs[0].isolated.lost


def test_a_longer_lag_loses_more(runs: list[split_brain.SplitBrainRun]) -> None:
    assert runs[2].window_s > runs[1].window_s
    assert runs[2].isolated.lost > runs[1].isolated.lost


def test_wait_confirms_nothing_that_is_lost_and_costs_its_timeout(runs: list[split_brain.SplitBrainRun]) -> None:
    run = runs[0]
    waited = run.writer("a2")
    assert waited.lost == 0, "a write WAIT confirmed on a replica survives"
    assert waited.outcomes()["unconfirmed"] > 0, "during the cut WAIT saw no replica"
    cost = split_brain.wait_cost(run)
    assert cost["WAIT during"] is not None and cost["WAIT during"] >= 0.8 * run.wait_ms


def test_the_sentinels_side_loses_nothing(runs: list[split_brain.SplitBrainRun]) -> None:
    for run in runs:
        assert run.writer("b").lost == 0


def test_the_table_and_the_figure(runs: list[split_brain.SplitBrainRun]) -> None:
    rows = split_brain.loss_table(runs)
    assert len(rows) == 4 and {r["client"] for r in rows} >= {"a (plain)"}
    fig = split_brain.figure(runs)
    assert len(fig.layout.annotations) >= 3 * 4  # subplot titles and the marked moments
    assert "подтверждённые" in fig.layout.title.text and "разрез" in {a.text for a in fig.layout.annotations}
    assert "acknowledged" in split_brain.figure(runs, lang="en").layout.title.text  # the lab's report


def test_failed_after_counts_only_the_attempts_from_a_moment_on() -> None:
    """WriterResult.failed_after: what the partition may have caused is what was sent from the cut on; an
    attempt before it that timed out (a loaded machine's first write) is not counted."""
    from labs.experiments.partition_writes import Write, WriterResult

    writes = (Write(-1.5, 0.5, 1, "unknown", "TimeoutError"), Write(-0.5, 0.001, 2, "acked"),
              Write(0.2, 0.001, 3, "acked"), Write(1.0, 0.1, 4, "refused", "ClusterDownError"))
    result = WriterResult("other", "majority", writes, frozenset())
    assert [w.value for w in result.failed_after(0.0)] == [4]
    assert [w.value for w in result.failed_after(-2.0)] == [1, 4]
    assert result.failed_after(2.0) == ()
