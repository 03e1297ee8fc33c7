"""labs.panels.shard_charges: charges per shard from a real SQLite ledger, a line that stops when a shard does."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.panels.shard_charges import ShardChargesPanel
from solutions.ledger import Charge, Ledger
from solutions.shards import shard_of

pytestmark = pytest.mark.timeout(30)
SHARDS = ["orders:{0}", "orders:{1}", "orders:{2}"]


def order_in(shard: int) -> str:
    return next(f"order-{i}" for i in range(100) if shard_of(f"order-{i}", 3) == shard)


def charge(ledger: Ledger, shard: int, n: int, start: int) -> None:
    ledger.write([Charge(f"ev-{start + i}", order_in(shard), "1.00", f"{start + i}-0", "w") for i in range(n)],
                 once=True)


def test_counts_each_shards_charges_and_a_stopped_shard_drops_to_zero(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    panel = ShardChargesPanel(path, SHARDS, refresh_s=0.05, window_s=0.2, max_duration_s=20).start()
    try:
        assert panel.wait_for_samples(2), "no ledger yet reads as no charges, not as an error"
        assert panel.samples[-1].charged == (0, 0, 0)
        ledger = Ledger(path).open()
        for shard, n in enumerate((3, 5, 7)):
            charge(ledger, shard, n, 100 * shard)
        assert panel.wait_for(lambda s: bool(s) and s[-1].charged == (3, 5, 7))
        assert max(s.per_s[2] for s in panel.samples) > 0
        t_mark = panel.mark("kill -9")
        for k in range(6):  # shard 0 stops; shards 1 and 2 keep charging
            charge(ledger, 1, 2, 1000 + 10 * k)
            charge(ledger, 2, 2, 2000 + 10 * k)
            assert panel.wait_for(lambda s, k=k: bool(s) and s[-1].charged[1] == 5 + 2 * (k + 1))
        assert panel.wait_for(lambda s: bool(s) and s[-1].per_s[0] == 0.0 and s[-1].per_s[1] > 0)
        ledger.close()
    finally:
        panel.stop()
    assert not panel.running and panel.stop_reason == "stop()"
    assert panel.marks == [(t_mark, "kill -9")]
    figure = panel.figure
    assert [trace.name for trace in figure.data] == ["orders:{0}", "orders:{1}", "orders:{2}"]
    assert list(figure.data[1].y) == [s.per_s[1] for s in panel.samples]
    assert figure.layout.shapes[0].x0 == t_mark and figure.layout.annotations[0].text == "kill -9"
    assert "остановлена" in panel.label.value


def test_stops_by_itself_after_max_duration(tmp_path: Path) -> None:
    panel = ShardChargesPanel(tmp_path / "none.sqlite3", SHARDS[:1], refresh_s=0.05, max_duration_s=0.3).start()
    assert panel.wait_stopped(5)
    assert panel.stop_reason == "max_duration_s=0.3"
