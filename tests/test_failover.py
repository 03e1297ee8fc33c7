"""Sentinel failover under load, with the master killed (kill -9) or paused (SIGSTOP).

Killed: every event whose XADD was confirmed by ``WAIT 1`` must be charged exactly once
(``sqlite`` dedupe), and charging must resume within a few seconds of the promotion.

Paused: the old master keeps its connections open and never answers (a stall or a
partition). The workers must not sit out their socket timeouts on it: they hear Sentinel's
``+switch-master`` and charge the first event written to the new master about a second
after the promotion (:mod:`solutions.failover_watch`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from billing_support import ledger_rows, reaped, spawn, stop_process, wait_until

from labs.launcher.topology import Topology

RESUME_WITHIN_S = 6.0


def charged_at(ledger: Path) -> list[tuple[str, float]]:
    rows = ledger_rows(ledger, "SELECT event_id, charged_at FROM charges ORDER BY id")
    return [(str(e), float(t)) for e, t in rows]


def confirmed_events(log: Path) -> set[str]:
    return confirmed_after(log, 0.0)


def confirmed_after(log: Path, since: float) -> set[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    records = [json.loads(line) for line in lines if line.endswith("}")]
    return {r["event_id"] for r in records if r["status"] == "confirmed" and r["time"] > since}


@pytest.mark.slow
@pytest.mark.failover
@pytest.mark.timeout(170)
@pytest.mark.parametrize("delay_ms", ["5", "0"], ids=["per-message", "batch"])
def test_hard_failover_under_load_loses_nothing_confirmed_and_charges_once(
    delay_ms: str, sentinel_topology: Topology, tmp_path: Path
) -> None:
    topo = sentinel_topology
    via = [arg for host, port in topo.addresses().sentinels for arg in ("--sentinel", f"{host}:{port}")]
    ledger, sent_log = tmp_path / "ledger.sqlite3", tmp_path / "sent.jsonl"
    workers = [
        spawn("solutions.billing", *via, "--ledger", str(ledger), "--consumer", f"w{i}", "--dedupe", "sqlite",
              "--handler-delay-ms", delay_ms, "--block-ms", "500", "--min-idle-ms", "3000",
              "--claim-interval-ms", "500", "--metrics-interval-s", "60", log_path=tmp_path / f"w{i}.log")
        for i in (1, 2)
    ]
    producer = spawn("solutions.producer", *via, "--rate", "100", "--wait-replicas", "1",
                     "--wait-timeout-ms", "500", "--log", str(sent_log), log_path=tmp_path / "producer.log")
    with reaped(producer, *workers):
        _check_failover(topo, workers, producer, ledger, sent_log, tmp_path)


def _check_failover(topo: Topology, workers: list[subprocess.Popen[bytes]], producer: subprocess.Popen[bytes],
                    ledger: Path, sent_log: Path, tmp_path: Path) -> None:
    try:
        wait_until(lambda: len(charged_at(ledger)) >= 100, 20, "charging under load before the fault")
        killed_at = time.time()
        result = topo.failover(hard=True)
        promoted_at = killed_at + result.elapsed_s
        wait_until(lambda: any(t > promoted_at for _, t in charged_at(ledger)), 20, "charges after promotion")
        # WAIT 1 confirms again once the old master is back as a replica of the new one
        # (Sentinel reconfigures it some seconds after its restart): keep the load on until then.
        wait_until(lambda: len(confirmed_after(sent_log, promoted_at)) >= 50, 60, "confirmed sends after the failover")
    finally:
        assert stop_process(producer, signal.SIGINT) == 0
    confirmed = confirmed_events(sent_log)
    assert len(confirmed) > 150

    def all_confirmed_charged() -> bool:
        return confirmed <= {e for e, _ in charged_at(ledger)}

    try:
        wait_until(all_confirmed_charged, 40, "every confirmed event charged")
    finally:
        codes = [stop_process(w) for w in workers]
    assert codes == [0, 0]
    rows = charged_at(ledger)
    counts: dict[str, int] = {}
    for event_id, _ in rows:
        counts[event_id] = counts.get(event_id, 0) + 1
    duplicated = {e: n for e, n in counts.items() if n > 1}
    assert not duplicated, f"charged more than once: {list(duplicated)[:5]}"
    first_after = min(t for _, t in rows if t > promoted_at)
    print(f"failover {result.elapsed_s:.1f}s, charging resumed {first_after - promoted_at:.2f}s after promotion, "
          f"{len(confirmed)} confirmed sends, {len(rows)} charges, {len(counts)} events")
    assert first_after - promoted_at < RESUME_WITHIN_S, f"charging resumed {first_after - promoted_at:.1f}s late"
    for i in (1, 2):
        assert "drain complete" in (tmp_path / f"w{i}.log").read_text()


STALL_RESUME_WITHIN_S = 3.0


def _charge_times(ledger: Path, prefix: str) -> list[float]:
    return [t for e, t in charged_at(ledger) if e.startswith(prefix)]


@pytest.mark.slow
@pytest.mark.failover
@pytest.mark.timeout(120)
def test_paused_master_workers_charge_soon_after_promotion(sentinel_topology: Topology, tmp_path: Path) -> None:
    topo = sentinel_topology
    via = [arg for host, port in topo.addresses().sentinels for arg in ("--sentinel", f"{host}:{port}")]
    ledger = tmp_path / "ledger.sqlite3"
    workers = [
        spawn("solutions.billing", *via, "--ledger", str(ledger), "--consumer", f"w{i}", "--dedupe", "sqlite",
              "--handler-delay-ms", "5", "--metrics-interval-s", "60", log_path=tmp_path / f"w{i}.log")
        for i in (1, 2)
    ]
    producer = spawn("solutions.producer", *via, "--rate", "100", log_path=tmp_path / "producer.log")
    with reaped(producer, *workers):
        wait_until(lambda: len(charged_at(ledger)) >= 100, 30, "charging under load before the stall")
        old = topo.master_addr()
        pid = topo.server(old[1]).pid()
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        paused_at = time.time()
        try:
            promoted_at, resumed_s = _resume_after_promotion(topo, old, ledger)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert stop_process(producer, signal.SIGINT) == 0
        assert [stop_process(w) for w in workers] == [0, 0]
    print(f"paused master: promoted {promoted_at - paused_at:.2f}s after the pause; first charge of an event "
          f"written to the new master {resumed_s:.2f}s after the promotion")
    assert resumed_s <= STALL_RESUME_WITHIN_S, f"charging resumed {resumed_s:.1f}s after the promotion"
    for i in (1, 2):
        assert "drain complete" in (tmp_path / f"w{i}.log").read_text()


def _resume_after_promotion(topo: Topology, old: tuple[str, int], ledger: Path) -> tuple[float, float]:
    """Wait for the promotion, then write events straight to the new master until one is charged.

    Returns the promotion's time and the seconds from it to that first charge.
    """
    new = topo.wait_new_master(old, time.monotonic() + 30)
    promoted_at = time.time()
    written = 0
    with redis.Redis(host=new[0], port=new[1], socket_timeout=2) as direct:

        def write_and_check() -> bool:
            nonlocal written
            direct.xadd("orders", {"type": "order.paid", "order_id": f"after-{written}", "amount": "1.00",
                                   "event_id": f"after-{written}"})
            written += 1
            return bool(_charge_times(ledger, "after-"))

        wait_until(write_and_check, 30, "a charge of an event written to the new master")
    return promoted_at, min(_charge_times(ledger, "after-")) - promoted_at
