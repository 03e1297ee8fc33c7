"""labs.experiments.cluster_minority: a master cut off with its client acknowledges for about a node timeout.

One run of both node timeouts side by side (about 20 s): semantics with margins, never exact timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from netns_support import own_namespaces, skip_without_netns

from labs.experiments import cluster_minority

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[cluster_minority.MinorityRun]:
    skip_without_netns()
    before = own_namespaces()
    done = cluster_minority.run_timeouts(Path(tmp_path_factory.mktemp("minority")))
    left = own_namespaces() - before
    assert not left, f"a run left network namespaces behind: {sorted(left)}"
    return done


def test_the_cut_off_master_acknowledges_for_about_a_node_timeout_then_refuses(
    runs: list[cluster_minority.MinorityRun],
) -> None:
    for run in runs:
        timeout_s = run.node_timeout_ms / 1000
        # PFAIL needs a ping unanswered for a node timeout; the ping goes out within half a timeout.
        assert 0.8 * timeout_s <= run.window_s <= 1.5 * timeout_s + 1.5, (run.node_timeout_ms, run.window_s)
        a = run.writer("a")
        refusals = {w.error for w in a.writes if w.t_s > run.window_s and w.outcome == "refused"}
        assert "ClusterDownError" in refusals, refusals
        assert a.lost > 0, "what the cut-off master acknowledged alone is gone after the heal"


def test_the_majority_promotes_the_replica_and_the_longer_timeout_loses_more(
    runs: list[cluster_minority.MinorityRun],
) -> None:
    short, long = runs
    for run in runs:
        assert run.promoted_s < run.healed_s, "the majority promoted the replica during the cut"
        # The sides time out on their own clocks: the old master may still acknowledge for a moment after the
        # promotion (two masters of one slot), never for longer than its own window.
        assert 0.0 <= run.two_masters_s <= run.window_s
        b = run.writer("b")
        assert b.lost == 0 and b.acked_after(run.promoted_s), "the majority writes to the promoted replica"
    assert long.writer("a").lost > short.writer("a").lost and long.window_s > short.window_s


def test_other_shards_are_unaffected(runs: list[cluster_minority.MinorityRun]) -> None:
    for run in runs:
        other = run.writer("other")
        # From the cut on; a write before it may time out on a loaded machine (seen once: the first one, 0.5 s).
        assert not other.failed_after(0.0) and other.acked_after(0.0) and other.lost == 0, other.outcomes()


def test_the_table_and_the_figure(runs: list[cluster_minority.MinorityRun]) -> None:
    rows = cluster_minority.loss_table(runs)
    assert [r["cluster-node-timeout ms"] for r in rows] == [1000, 3000]
    fig = cluster_minority.figure(runs)
    assert len(fig.data) >= 6 and "Меньшинство" in fig.layout.title.text  # the notebook's words
    assert "minority" in cluster_minority.figure(runs, lang="en").layout.title.text  # the lab's report
