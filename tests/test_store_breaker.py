"""The store's breaker on its own: states, probes, log lines and metrics.

The probe here is a function that fails a given number of times with a real SQLite error
(the breaker's subject is its own state, not SQLite). The breaker inside a real worker, with
real faults of a real ledger for every dedupe strategy, is tests/test_store_outage.py.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest
from billing_support import until

from solutions.connection import Backoff
from solutions.metrics import Metrics
from solutions.sqlite_errors import Fault, LedgerUnavailable, fault_of
from solutions.store_breaker import StoreBreaker


def disk_full() -> LedgerUnavailable:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x TEXT)")
    db.execute("PRAGMA max_page_count=2")
    try:
        db.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 50)
    except sqlite3.Error as exc:
        fault = fault_of(exc)
        assert fault is not None
        return LedgerUnavailable(fault, exc, reopened=True)
    finally:
        db.close()
    raise AssertionError("the page limit did not fill the database")


class FlakyProbe:
    """Fails ``failures`` times (disk full), then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise disk_full()


def breaker_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "solutions.store_breaker"]


async def until_logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    await until(lambda: any(text in line for line in breaker_lines(caplog)), 5, f"a {text!r} line")


@pytest.mark.timeout(20)
def test_an_outage_is_one_line_down_a_summary_and_one_line_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="solutions")
    metrics = Metrics(stream="s", group="g", consumer="c")
    probe = FlakyProbe(failures=8)

    async def backlog() -> str:
        return "the group has 7 pending and 3 not yet read"

    async def scenario() -> None:
        breaker = StoreBreaker(probe, metrics, backlog=backlog, summary_every_s=0.05,
                               backoff=Backoff(base_s=0.01, cap_s=0.02))
        stop = asyncio.Event()
        assert breaker.up and metrics.values.store_up == 1
        await asyncio.wait_for(breaker.wait_up(stop), 1)  # up: returns at once
        for _ in range(3):  # three charges fail at once (runs of one flush): one outage
            breaker.failed(disk_full(), 5)
        assert not breaker.up and metrics.values.store_up == 0 and metrics.values.store_outages == 1
        with pytest.raises(LedgerUnavailable) as refused:
            breaker.refuse()
        assert refused.value.fault is Fault.DISK_FULL
        await asyncio.wait_for(breaker.wait_up(stop), 5)
        assert breaker.up and metrics.values.store_up == 1 and probe.calls == 9
        breaker.refuse()  # up (on trial): nothing raised
        breaker.committed()  # a charge committed: the store is back
        await until_logged(caplog, "business store back")
        await breaker.aclose()

    asyncio.run(scenario())
    lines = breaker_lines(caplog)
    assert lines[0].startswith("business store down (disk full: database or disk is full (SQLITE_FULL))")
    assert "5 messages left pending, not counted as attempts" in lines[0]
    assert any(line.startswith("business store still down after") for line in lines[1:-1])
    assert lines[-1].startswith("business store back after")
    assert "(9 probes" in lines[-1] and "15 messages had been left pending" in lines[-1]
    assert "the group has 7 pending and 3 not yet read" in lines[-1]
    assert len(lines) < 8  # a summary per summary_every_s, not a line per probe or per message


@pytest.mark.timeout(20)
def test_waiting_for_the_store_ends_on_stop_and_closing_stops_the_probes() -> None:
    metrics = Metrics(stream="s", group="g", consumer="c")
    probe = FlakyProbe(failures=10**6)

    async def scenario() -> None:
        breaker = StoreBreaker(probe, metrics, backoff=Backoff(base_s=0.01, cap_s=0.01))
        breaker.failed(disk_full(), 1)
        stop = asyncio.Event()
        waiter = asyncio.create_task(breaker.wait_up(stop))
        await asyncio.sleep(0.1)
        assert not waiter.done() and probe.calls > 1
        stop.set()
        await asyncio.wait_for(waiter, 1)
        await breaker.aclose()
        calls = probe.calls
        await asyncio.sleep(0.05)
        assert probe.calls == calls and not breaker.up

    asyncio.run(scenario())


@pytest.mark.timeout(20)
def test_a_charge_that_fails_again_on_trial_is_the_same_outage(caplog: pytest.LogCaptureFixture) -> None:
    """A disk almost full takes the probe's one row and refuses the batch of charges that follows:
    on trial (half-open) that failure pauses charging again without a second ``down`` line or a
    second outage, probing goes on, and the first charge that commits says ``back`` once."""
    caplog.set_level(logging.INFO, logger="solutions")
    metrics = Metrics(stream="s", group="g", consumer="c")
    probe = FlakyProbe(failures=2)

    async def scenario() -> None:
        breaker = StoreBreaker(probe, metrics, backoff=Backoff(base_s=0.01, cap_s=0.01), trial_s=60)
        stop = asyncio.Event()
        breaker.failed(disk_full(), 4)
        await asyncio.wait_for(breaker.wait_up(stop), 5)  # the probe committed: on trial
        assert breaker.up and probe.calls == 3
        breaker.failed(disk_full(), 4)  # and the charges fail again
        assert not breaker.up and metrics.values.store_up == 0 and metrics.values.store_outages == 1
        await asyncio.wait_for(breaker.wait_up(stop), 5)  # the next probe commits: on trial again
        assert probe.calls == 4 and not any("store back" in line for line in breaker_lines(caplog))
        breaker.committed()
        await until_logged(caplog, "business store back")
        assert breaker.up and metrics.values.store_outages == 1
        breaker.failed(disk_full(), 1)  # later: a new outage
        assert metrics.values.store_outages == 2
        await breaker.aclose()

    asyncio.run(scenario())
    lines = breaker_lines(caplog)
    assert [line.split(" (")[0].split(" after")[0] for line in lines] == [
        "business store down", "business store back", "business store down"]
    assert "1 times a probe and then a charge failed" in lines[1] and "4 messages had been left pending" in lines[1]


@pytest.mark.timeout(20)
def test_on_trial_with_nothing_to_charge_the_store_is_back_after_the_trial(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="solutions")
    metrics = Metrics(stream="s", group="g", consumer="c")

    async def scenario() -> None:
        breaker = StoreBreaker(FlakyProbe(failures=0), metrics, backoff=Backoff(base_s=0.01, cap_s=0.01),
                               trial_s=0.2)
        breaker.failed(disk_full(), 1)
        await until_logged(caplog, "business store back")
        assert breaker.up and metrics.values.store_up == 1
        await breaker.aclose()

    asyncio.run(scenario())
