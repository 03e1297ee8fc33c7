"""labs.experiments.worker_partition: the billing worker across a real Sentinel partition (about 45 s).

Semantics only: no double charge with --dedupe sqlite, duplicates counted with none, nothing
that survived in Redis left uncharged, no restart, a handful of warnings rather than a flood.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from netns_support import own_namespaces, skip_without_netns

from labs.experiments import worker_partition

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, worker_partition.WorkerPartition]:
    skip_without_netns()
    before = own_namespaces()
    done = worker_partition.run_both(Path(tmp_path_factory.mktemp("worker-partition")))
    left = own_namespaces() - before
    assert not left, f"a run left network namespaces behind: {sorted(left)}"
    return {run.dedupe: run for run in done}


def test_the_split_brain_loses_confirmed_events_in_redis(runs: dict[str, worker_partition.WorkerPartition]) -> None:
    for run in runs.values():
        assert run.promoted_s < run.healed_s < run.demoted_s
        assert run.confirmed_gone > 0, "the old master's confirmed entries vanished at its demotion"


def test_with_sqlite_nothing_is_charged_twice_and_nothing_that_survived_is_lost(
    runs: dict[str, worker_partition.WorkerPartition],
) -> None:
    run = runs["sqlite"]
    assert run.duplicated == 0
    assert run.survived_uncharged == 0 and run.survived > 0


def test_with_none_the_duplicates_are_counted(runs: dict[str, worker_partition.WorkerPartition]) -> None:
    run = runs["none"]
    assert run.duplicated > 0, "both sides charged the backlog (or a reclaimed entry) again"
    assert run.survived_uncharged == 0


def test_the_workers_need_no_restart_and_log_a_few_lines(runs: dict[str, worker_partition.WorkerPartition]) -> None:
    for run in runs.values():
        assert run.restarts == 0 and run.exit_codes == (0, 0)
        assert all(n <= 10 for n in run.warning_lines.values()), run.warning_lines
