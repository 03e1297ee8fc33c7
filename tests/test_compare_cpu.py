"""labs.compare.cpu, labs.compare.client_profile and the ceiling in labs.compare.summary: the CPU
accounting of a throughput run, the client's profile, and the sentence that names the side that
saturated. Processes here burn a fixed amount of CPU *time* (not wall time), so nothing depends on
how busy the machine is; the sentences are tested on made-up figures (the wording logic, not a broker)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labs.compare import client_profile, cpu, plan, summary
from labs.compare.cpu import CpuFigures, Snapshot, Times
from labs.compare.run import write_profiles
from labs.compare.scenarios import Row
from labs.polling import wait_until

pytestmark = pytest.mark.timeout(60)
BURN_S = 0.25  # CPU seconds each burner spends

# a process that burns BURN_S of its own CPU time, writes ``<name>.done`` and sleeps until killed; the
# leader first starts a second burner in its process group and waits for it
BURNER = """
import os, subprocess, sys, time
out, name, child = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if child:
    subprocess.Popen([sys.executable, "-c", sys.argv[4], out, name + "-child", "0", sys.argv[4]])
    while not os.path.exists(os.path.join(out, name + "-child.done")):
        time.sleep(0.01)
start = time.process_time()
while time.process_time() - start < float(os.environ["BURN_S"]):
    pass
open(os.path.join(out, name + ".done"), "w").close()
time.sleep(600)
"""


def _burn_here(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_a_publish_s_cpu_is_the_clients_and_each_broker_group_s_and_the_parts_add_up(tmp_path: Path) -> None:
    leader = subprocess.Popen([sys.executable, "-c", BURNER, str(tmp_path), "broker", "1", BURNER],
                              env={**os.environ, "BURN_S": str(BURN_S)}, start_new_session=True)
    try:
        before = cpu.snapshot({"broker": leader.pid, "gone": None})
        _burn_here(BURN_S)  # the "client": this process
        wait_until(lambda: (tmp_path / "broker.done").exists(), 30.0, "both burners to finish")
        fig = cpu.figures(before, cpu.snapshot({"broker": leader.pid, "gone": None}), messages=1000)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
    values = [v for v in fig.values() if isinstance(v, int | float)]
    assert all(v >= 0 for v in values), fig
    assert fig["client_cpu_s"] >= BURN_S * 0.95, fig  # this process's own burn
    # the leader and the burner it started in its process group: twice the burn, counted as one broker
    assert fig["broker_cpu_s"] >= 2 * BURN_S * 0.95, fig
    assert fig["busiest"] == "broker" and fig["busiest_cpu_s"] == fig["broker_cpu_s"], fig
    # others is what the machine's busy time leaves: client + broker + others covers the machine's busy time
    assert fig["client_cpu_s"] + fig["broker_cpu_s"] + fig["others_cpu_s"] == pytest.approx(
        max(fig["machine_busy_s"], fig["client_cpu_s"] + fig["broker_cpu_s"]), abs=1e-5), fig
    assert fig["cores"] >= 1 and fig["messages"] == 1000 and fig["wall_s"] > 0, fig
    assert cpu.per_message_us(fig, fig["client_cpu_s"]) == pytest.approx(fig["client_cpu_s"] * 1000, abs=0.1)


def test_a_process_gone_between_snapshots_is_left_out_and_nothing_goes_negative() -> None:
    before = Snapshot(10.0, Times(5.0, 1.0), {"a": Times(2.0, 0.5), "b": Times(1.0, 0.1), "c": None}, 100.0)
    after = Snapshot(12.0, Times(6.0, 1.5), {"a": Times(3.5, 0.7), "b": None, "c": Times(9.0, 0.0)}, 103.0)
    fig = cpu.figures(before, after, messages=500)
    assert (fig["wall_s"], fig["client_cpu_s"], fig["broker_cpu_s"], fig["busiest"]) == (2.0, 1.0, 1.5, "a"), fig
    assert fig["client_wait_s"] == 0.5 and fig["broker_wait_s"] == pytest.approx(0.2), fig
    assert fig["others_cpu_s"] == pytest.approx(0.5), fig  # 3.0 busy - 1.0 client - 1.5 broker
    assert cpu.share(fig, fig["client_cpu_s"]) == 0.5 and cpu.per_message_us(fig, fig["broker_cpu_s"]) == 3000.0
    crowded = cpu.figures(before, Snapshot(12.0, Times(7.0, None), {"a": Times(4.0, 0.5)}, 100.5), messages=0)
    assert crowded["others_cpu_s"] == 0.0 and crowded["client_wait_s"] is None, crowded  # never negative
    assert cpu.per_message_us(crowded, 1.0) is None


def _fig(wall_s: float, messages: int, client: float, broker: float, busiest: float, others: float,
         busiest_name: str = "redis-7000 (master)", client_wait: float = 0.0) -> CpuFigures:
    return CpuFigures(wall_s=wall_s, messages=messages, client_cpu_s=client, client_wait_s=client_wait,
                      broker_cpu_s=broker,
                      broker_wait_s=0.0, busiest=busiest_name, busiest_cpu_s=busiest,
                      machine_busy_s=client + broker + others, others_cpu_s=others, cores=2, load_1m=4.5)


def _rows(broker: str, one_per_s: float, best_per_s: float, best: CpuFigures, window: int = 256,
          p50_ms: float = 20.0) -> list[Row]:
    one_fig = _fig(150 / one_per_s, 150, 0.3 * 150 / one_per_s, 0.2 * 150 / one_per_s, 0.1 * 150 / one_per_s, 0.0)
    return [{"broker": broker, "case": "window-1", "window": 1, "publish_per_s": one_per_s, "cpu": one_fig},
            {"broker": broker, "case": "window-16", "window": 16, "publish_per_s": one_per_s * 2},
            {"broker": broker, "case": f"window-{window}", "window": window, "publish_per_s": best_per_s,
             "publish_p50_ms": p50_ms, "cpu": best}]


def test_a_saturated_client_is_named_with_its_ceiling_and_x5_out_of_reach() -> None:
    # 1500/s one in flight, 6300/s windowed: 3000 messages in 0.476 s, the client 0.45 s of CPU (150 µs each)
    rows = _rows("redis", 1500.0, 6300.0, _fig(3000 / 6300, 3000, 0.45, 0.15, 0.12, 0.6))
    (b,) = summary.bounds(rows)
    assert b.saturated == "client" and round(b.factor, 1) == 4.2 and round(b.client_us) == 150, b
    assert round(b.ceiling_per_s) == 6667 and not b.reachable, b  # 1 / 150 µs, x4.4 over 1500/s
    text = summary.why(b)
    assert "under x5" in text and "The client saturated" in text and "x5 is not reachable here" in text, text
    assert "needs at most 133 µs" in text and "Other work took 1.26 of the 2 cores" in text, text
    ru = summary.why(b, "ru")
    assert "меньше ×5" in ru and "Упёрлось в клиента" in ru and "недостижимо" in ru, ru
    (row,) = summary.ceiling(rows).rows
    assert row[0] == "redis" and row[4] == 256 and row[11:] == ("no", "client"), row
    assert summary.ceiling(rows, "ru").rows[0][11:] == ("нет", "клиент")
    assert summary.reasons(rows).rows == (("redis", text),)


def test_a_saturated_broker_process_is_named_by_its_label() -> None:
    rows = _rows("rabbitmq", 200.0, 3000.0, _fig(1.0, 3000, 0.5, 1.4, 0.92, 0.1, busiest_name="rabbit-5672"))
    (b,) = summary.bounds(rows)
    assert b.saturated == "broker" and b.reachable, b  # the machine's 2 cores / 633 µs: 3158/s, x15.8
    text = summary.why(b)
    assert "The broker saturated: its process rabbit-5672 used 0.92 of a core" in text, text
    assert "under x5" not in text and "x5 is reachable here." in text, text


def test_full_cores_with_other_work_and_a_wait_for_confirms_are_told_apart() -> None:
    machine = _rows("nats", 700.0, 2800.0, _fig(1.0, 2800, 0.6, 0.5, 0.3, 0.8, busiest_name="nats-4222",
                                                client_wait=0.35))
    (b,) = summary.bounds(machine)
    assert b.saturated == "machine", b
    text = summary.why(b)
    assert "the machine's cores were full: client 0.60, broker 0.50, other work 0.80 of 2" in text, text
    assert "The client spent 35% of the time waiting for a free core." in text, text
    waiting = _rows("nats+always", 500.0, 2000.0, _fig(1.0, 2000, 0.3, 0.4, 0.2, 0.1, busiest_name="nats-4222"),
                    p50_ms=120.0)
    (w,) = summary.bounds(waiting)
    assert w.saturated == "waiting" and w.reachable, w
    text = summary.why(w)
    assert "No side saturated" in text and "window round trip of 120.0 ms" in text, text
    assert "x5 is reachable here, not reached in this run" in text, text  # x4.0 measured, the ceiling allows more
    assert "ждал подтверждений" in summary.why(w, "ru")


def test_rows_without_cpu_figures_have_no_bound_and_the_sweep_keeps_its_first_columns() -> None:
    rows: list[Row] = [{"broker": "redis", "case": "window-1", "window": 1, "publish_per_s": 900.0},
                       {"broker": "redis", "case": "window-256", "window": 256, "publish_per_s": 9000.0}]
    assert summary.bounds(rows) == [] and not summary.ceiling(rows).rows
    sweep = summary.window_sweep(rows)
    assert sweep.rows[1][:4] == ("redis", 256, 9000.0, 10.0) and sweep.rows[1][6:] == (None,) * 8
    assert len(sweep.columns) == len(sweep.rows[0]) == len(summary.window_sweep(rows, "ru").columns)


def test_the_profiled_publish_runs_at_the_best_window_of_the_sweep() -> None:
    rows = _rows("redis", 1000.0, 9000.0, _fig(1.0, 9000, 0.5, 0.2, 0.1, 0.0), window=64)
    (case,) = plan.profile_cases(rows, "redis", quick=True)
    assert (case.window, case.profile, case.hold, case.name) == (64, True, True, "profile-64"), case
    assert plan.profile_cases(rows, "nats", quick=True) == []


def test_the_client_profile_ranks_own_time_and_is_written_beside_the_report(tmp_path: Path) -> None:
    async def publish_like() -> int:
        total = 0
        for i in range(300):
            total += len(json.dumps({"event_id": f"e-{i}", "amount": list(range(40))}))
            await asyncio.sleep(0)
        return total

    async def run() -> tuple[int, list[client_profile.ProfileLine], str]:
        result, profiler = await client_profile.profiled(publish_like())
        lines, text = client_profile.top(profiler, limit=10)
        return result, lines, text

    result, lines, text = asyncio.run(run())
    assert result > 0 and 0 < len(lines) <= 10 and "ncalls" in text, lines
    own = [line["own_s"] for line in lines]
    assert own == sorted(own, reverse=True) and all(0 <= line["own_share"] <= 1 for line in lines), lines
    assert sum(line["own_share"] for line in lines) <= 1.001, lines
    assert any("json" in line["function"] for line in lines), lines
    assert client_profile.label("/x/site-packages/redis/client.py", 5, "execute", ["/x/site-packages/"]) == \
        "redis/client.py:5(execute)"
    row: Row = {"broker": "redis+WAIT", "case": "profile-256", "window": 256, "confirmed": 3000,
                "publish_per_s": 4000.0, "profile_top": lines, "profile_text": text,
                "cpu": _fig(0.75, 3000, 0.7, 0.2, 0.1, 0.0)}
    table = summary.profiles([row])
    assert len(table.rows) == min(5, len(lines)) and table.rows[0][:4] == ("redis+WAIT", 256, 4000.0, 1), table.rows
    (path,) = write_profiles([row, {"broker": "nats", "case": "window-1"}], tmp_path)
    assert path.name == "profile-redis-WAIT.txt" and "not a throughput figure" in path.read_text()
    assert "ncalls" in path.read_text()
