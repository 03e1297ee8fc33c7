"""Lab 1: the reference functions on a real Redis, and the quick lab run with its invariants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from labs.lab1 import run as lab1_run
from labs.lab1.record import Sample
from labs.lab1.scenario import run_scenario
from labs.lab1.settings import PRESETS, Lab1Settings
from solutions import lab1


def _fail(msg_id: str, fields: object, worker: str) -> None:
    raise RuntimeError("simulated failure")


def _ok(msg_id: str, fields: object, worker: str) -> None:
    return None


def test_consumer_acks_only_what_it_processed(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    assert lab1.ensure_group(redis_client, stream, "billing") is True
    assert lab1.ensure_group(redis_client, stream, "billing") is False  # BUSYGROUP is fine
    lab1.produce_one(redis_client, stream, 1)
    assert lab1.consume_once(redis_client, stream, "billing", "billing-1", _fail, block_ms=100) == 0
    assert redis_client.xpending(stream, "billing")["pending"] == 1
    lab1.produce_one(redis_client, stream, 2)
    assert lab1.consume_once(redis_client, stream, "billing", "billing-2", _ok, block_ms=100) == 1
    assert redis_client.xpending(stream, "billing")["pending"] == 1
    assert redis_client.xlen(stream) == 2  # XACK does not delete


def test_rescuer_journals_whose_message_it_took(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    lab1.ensure_group(redis_client, stream, "billing")
    first = lab1.produce_one(redis_client, stream, 1)
    second = lab1.produce_one(redis_client, stream, 2)
    lab1.consume_once(redis_client, stream, "billing", "billing-1", _fail, block_ms=100, count=1)
    lab1.consume_once(redis_client, stream, "billing", "billing-2", _fail, block_ms=100, count=1)
    redis_client.xdel(stream, second)  # trimmed while pending: XAUTOCLAIM reports and drops it
    cursor, journal = lab1.rescue_once(redis_client, stream, "billing", "rescuer", _ok, min_idle_ms=0)
    assert cursor == "0-0"
    assert [(j.msg_id, j.from_consumer, j.to_consumer, j.deliveries, j.ok) for j in journal] == [
        (first, "billing-1", "rescuer", 2, True)
    ]
    assert redis_client.xpending(stream, "billing")["pending"] == 0


def test_rescuer_leaves_a_young_message_alone(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}orders"
    lab1.ensure_group(redis_client, stream, "billing")
    lab1.produce_one(redis_client, stream, 1)
    lab1.consume_once(redis_client, stream, "billing", "billing-1", _fail, block_ms=100)
    _, journal = lab1.rescue_once(redis_client, stream, "billing", "rescuer", _ok, min_idle_ms=60_000)
    assert journal == []
    assert redis_client.xpending(stream, "billing")["pending"] == 1


@pytest.mark.slow
def test_quick_lab_passes_and_writes_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --smoke: the course's timings scaled down (seconds); on the lab's aof topology, which
    # the test session points at free ports.
    assert lab1_run.main(["--smoke", "--reports-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out and "Bonus: XADD latency" in out
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("lab1-")
    assert {"report.json", "report.md", "report.html", "producer-log.jsonl", "work-log.jsonl"} <= {
        p.name for p in folder.iterdir()
    }
    report = json.loads((folder / "report.json").read_text())
    assert report["passed"] is True
    assert len(report["checks"]) == 7
    sent = [json.loads(line) for line in (folder / "producer-log.jsonl").read_text().splitlines()]
    work = [json.loads(line) for line in (folder / "work-log.jsonl").read_text().splitlines()]
    assert {s["counter"] for s in sent} == {w["counter"] for w in work if w["ok"]}
    failed = {w["counter"] for w in work if not w["ok"]}
    assert failed and all(c % 5 == 0 for c in failed)
    assert {j["counter"] for j in report["data"]["journal"] if j["ok"]} == failed
    survival = {r["topology"]: r for r in report["data"]["persistence"]}
    assert survival["single"]["survived"] == 0 and survival["aof"]["lost"] == 0
    assert set(report["data"]["latency"]) == {"no MAXLEN", "MAXLEN ~ 10000", "MAXLEN = 10000"}
    assert report["data"]["maxlen_zero"] == {"filled": 25_000, "approximate": [15_001, 5_002], "exact": 0}
    assert any("MAXLEN ~ 0" in note and "15,001" in note for note in report["notes"])
    html = (folder / "report.html").read_text()
    assert html.count('class="plotly-graph-div"') == 3


def test_backlog_and_work_ms_default_to_the_course() -> None:
    # 0 and 0: `make lab-1` and its presets send the same events as before.
    assert (Lab1Settings().backlog, Lab1Settings().work_ms, Lab1Settings().messages) == (0, 0, 1000)
    assert PRESETS["smoke"].messages == PRESETS["smoke"].paced_messages == 60
    assert Lab1Settings(backlog=30, produce_s=1.0).messages == 30 + 10
    with pytest.raises(ValueError, match="negative"):
        Lab1Settings(backlog=-1)


def test_backlog_is_written_before_the_consumers_and_drains(
    redis_client: redis.Redis, redis_url: str, key_prefix: str
) -> None:
    stream = f"{key_prefix}orders"
    # 100 events at once, 20 ms of work each, 2 consumers: at least 1 s of lag to drain
    settings = Lab1Settings(
        backlog=100, work_ms=20, count=5, produce_s=0.5, produce_interval_ms=50, block_ms=200,
        rescue_interval_ms=300, min_idle_ms=300, drain_timeout_s=20.0, sample_interval_ms=100,
    )  # fmt: skip
    lags: list[int] = []

    def watch(phase: str, sample: Sample) -> None:
        lags.append(int(redis_client.xinfo_groups(stream)[0]["lag"]))

    result = run_scenario(lab1, redis_url, settings, stream=stream, on_progress=watch)
    rec = result.recorder
    assert result.drained and result.pending_end == 0
    assert sorted(s.counter for s in rec.sent) == list(range(1, settings.messages + 1))  # 100 + 10
    backlog_sent = max(s.t_s for s in rec.sent if s.counter <= settings.backlog)
    assert backlog_sent <= min(h.t_s for h in rec.handled)  # all written before any work began
    assert max(lags) > 0 == int(redis_client.xinfo_groups(stream)[0]["lag"])
    assert result.produce_s + result.drain_s >= 100 * 0.020 / 2  # the work took its time


def test_maxlen_zero_trims_at_most_10000_per_call_unless_exact(redis_client: redis.Redis, key_prefix: str) -> None:
    """redis-py's xadd(maxlen=0) sends MAXLEN ~ 0: 25,000 entries -> 15,001 -> 5,002; exact MAXLEN 0 empties."""
    from labs.lab1.maxlen_zero import measure, note

    m = measure(redis_client, f"{key_prefix}trap")
    assert (m.filled, m.approximate, m.exact) == (25_000, (15_001, 5_002), 0)
    assert redis_client.exists(f"{key_prefix}trap") == 0
    assert "25,000 -> 15,001 -> 5,002" in note(m)
