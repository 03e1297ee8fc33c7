"""Lab 3 on Redis Cluster (``make lab-3 TOPOLOGY=cluster``): a short failover phase on the session's cluster.

Every cell's stream is three shards, one per master; the failover kills the master that serves
slot 0, so one shard of each cell loses its master while the other two keep theirs. With
``sqlite`` nothing is lost or charged twice, every shard drains, the report names each shard,
and the shards whose master lived kept charging (no stop over a second, or over half the failed-over
shard's stop on a loaded machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.lab3 import run_lab
from labs.lab3.settings import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.failover, pytest.mark.timeout(240)]


def test_a_cluster_failover_stops_one_shard_and_loses_nothing_with_sqlite(tmp_path: Path) -> None:
    settings = PRESETS["smoke"].with_options(modes=("failover",), strategies=("sqlite",))
    lab = run_lab(settings=settings, topology="cluster", reports_dir=tmp_path)
    assert lab.runs.topology == "cluster"
    checks = {c.name: c for c in lab.report.checks}
    others = next(c for name, c in checks.items() if name.startswith("failover on a cluster"))
    assert others.passed, others.detail
    # Every check holds; the dedupe check may say "not exercised" when no re-send of the producer
    # happened to reach the stream twice in so short a failover phase (the full lab has the crash mode too).
    failed = [(c.name, c.detail) for c in checks.values()
              if not c.passed and not (c.name.startswith("sqlite: dedupe held") and "not exercised" in c.detail)]
    assert not failed, failed
    for run in lab.runs.runs:
        assert len(run.record.shards) == 3 and len(run.result.hit_shards) == 1, run.variant
        assert run.result.lost == run.result.lost_by_redis and run.result.duplicated == 0, run.result
        assert run.result.pending_end == 0 and run.result.lag_end == 0
        hit = run.result.hit_shards[0]
        assert (run.result.shard_downtime_s[hit] or 0) >= 1.0, "the killed master's shard waited for the promotion"
    (table,) = [t for t in lab.report.tables if t.title.startswith("Per shard")]
    assert len(table.rows) == 3 * len(lab.runs.runs)
    assert sum(row[4] == "its master failed over" for row in table.rows) == len(lab.runs.runs)
    assert any("one shard's master" in note and "the other shards at most" in note for note in lab.report.notes)
    assert lab.paths is not None and "Per shard" in lab.paths.markdown.read_text(encoding="utf-8")
