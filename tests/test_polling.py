"""labs.polling: a wait ends as soon as its condition holds, and a wait that never holds names what it waited for."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from labs.polling import poll, poll_async, until, wait_until


def test_wait_until_returns_the_value_once_a_thread_makes_it_true() -> None:
    box: list[int] = []
    threading.Timer(0.05, box.append, args=(7,)).start()
    assert wait_until(lambda: box and box[0], 5, "the timer") == 7


def test_a_wait_that_never_holds_names_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="waiting for the impossible"):
        wait_until(lambda: False, 0.1, "the impossible", poll_s=0.01)
    assert time.monotonic() - started < 2
    assert poll(lambda: False, 0.05) is False


def test_ignored_errors_count_as_not_yet() -> None:
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("still starting")
        return True

    assert wait_until(flaky, 5, "the endpoint", poll_s=0.001, ignoring=(ConnectionError,)) is True


def test_the_async_waits_let_other_tasks_run() -> None:
    async def scenario() -> None:
        flag = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, flag.set)
        assert await until(flag.is_set, 5, "the flag") is True
        assert await poll_async(lambda: True, 1) is True
        with pytest.raises(TimeoutError, match="nothing"):
            await until(lambda: False, 0.05, "nothing", poll_s=0.01)

    asyncio.run(scenario())
