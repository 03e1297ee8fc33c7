"""solutions.cancelling: a task that swallows its cancel (as asyncio.wait_for on Python 3.11 can, inside a redis-py
command) is cancelled again and ends; one that never ends is left behind after the bound, and said."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from solutions import cancelling
from solutions.cancelling import cancel_and_wait


async def _swallows_first_cancel(swallowed: list[int]) -> None:
    """Runs "until cancelled", but the first cancel is lost on its way (what wait_for does on 3.11)."""
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(1)


async def _never_ends(until: asyncio.Event) -> None:
    """Ignores every cancel; only ``until`` ends it (so that the test can let it go afterwards)."""
    while not until.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.01)


def test_a_swallowed_cancel_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cancelling, "RECANCEL_AFTER_S", 0.05)

    async def scenario() -> tuple[set[asyncio.Future[None]], list[int], bool]:
        swallowed: list[int] = []
        task = asyncio.create_task(_swallows_first_cancel(swallowed))
        await asyncio.sleep(0.02)
        left = await cancel_and_wait([task], 5.0)
        return left, swallowed, task.cancelled()

    left, swallowed, cancelled = asyncio.run(scenario())
    assert swallowed == [1], "the first cancel was swallowed"
    assert left == set() and cancelled


def test_a_task_that_never_ends_is_left_behind_and_named(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cancelling, "RECANCEL_AFTER_S", 0.05)

    async def scenario() -> list[str]:
        let_go = asyncio.Event()
        task = asyncio.create_task(_never_ends(let_go), name="stubborn")
        ended = asyncio.create_task(asyncio.sleep(0), name="ended")
        await asyncio.sleep(0.02)
        left = await cancel_and_wait([task, ended], 0.3)
        names = [t.get_name() for t in left if isinstance(t, asyncio.Task)]
        let_go.set()
        await task
        return names

    with caplog.at_level(logging.WARNING, logger="solutions.cancelling"):
        assert asyncio.run(scenario()) == ["stubborn"]
    assert any("left behind: stubborn" in r.getMessage() for r in caplog.records), caplog.text


def test_a_task_that_failed_has_its_error_retrieved() -> None:
    async def fails() -> None:
        raise ValueError("its own")

    async def scenario() -> set[asyncio.Future[None]]:
        task = asyncio.create_task(fails())
        await asyncio.sleep(0)
        return await cancel_and_wait([task], 1.0)

    assert asyncio.run(scenario()) == set()
