"""The handler's work a run at a time: one call for a run, the failures by position, slots held."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from billing_support import CountingHandler

from solutions.handler import BillingHandler, charge_each, process_each
from solutions.messages import OrderEvent, TransientError

pytestmark = pytest.mark.timeout(10)


def events(n: int) -> list[OrderEvent]:
    return [OrderEvent(f"1-{i}", "o-1", Decimal("1.00"), f"e-{i}", "order.paid", f"e-{i}") for i in range(n)]


def test_an_instant_run_that_fails_nothing_is_one_call_and_no_work() -> None:
    handler = BillingHandler(delay_ms=0)
    assert handler.instant and asyncio.run(handler.process_run(events(100), None)) == []


def test_simulated_failures_come_back_by_position_and_the_rest_is_done() -> None:
    handler = BillingHandler(delay_ms=0, fail_every=3)
    failures = asyncio.run(handler.process_run(events(7), None))
    assert [index for index, _ in failures] == [2, 5]
    assert all(isinstance(exc, TransientError) for _, exc in failures)


def test_a_handler_with_its_own_process_is_called_per_message_each_holding_a_slot() -> None:
    """A subclass's process() is not instant, so process_run calls it for every event; the
    slot (a semaphore of --parallelism) is held around each call."""
    handler = CountingHandler(delay_ms=1)

    async def four_runs() -> None:
        slot = asyncio.Semaphore(2)
        await asyncio.gather(*(handler.process_run(events(5), slot) for _ in range(4)))

    asyncio.run(four_runs())
    assert (handler.calls, handler.peak) == (20, 2)
    assert asyncio.run(process_each(handler, events(3), None)) == [] and handler.calls == 23


def test_a_runs_charges_are_the_rows_charge_makes_one_by_one() -> None:
    """The pipeline's flat batch (``charges``) holds what ``charge`` says for each event, in order."""
    handler = BillingHandler(stream="orders", delay_ms=0)
    run = [*events(3), OrderEvent("1-9", "o-2", Decimal("12.50"), None, "order.paid", "orders:1-9")]
    fast, each = handler.charges(run, "w-1"), charge_each(handler, run, "w-1")
    assert fast == each and len(fast) == 4
    assert list(fast) == [handler.charge(event, "w-1") for event in run]
    assert fast.rows[-4:] == ["orders:1-9", "o-2", "12.50", "1-9"]
