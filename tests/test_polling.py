"""labs.polling: a wait ends as soon as its condition holds, and a wait that never holds names what it waited for."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from labs import polling
from labs.polling import every, poll, poll_async, poll_value, poll_value_async, wait_until, wait_until_async


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
        assert await wait_until_async(flag.is_set, 5, "the flag") is True
        assert await poll_async(lambda: True, 1) is True
        with pytest.raises(TimeoutError, match="nothing"):
            await wait_until_async(lambda: False, 0.05, "nothing", poll_s=0.01)

    asyncio.run(scenario())


def test_one_name_per_meaning() -> None:
    """``until`` is only the deprecated name of the waiting (raising) coroutine, never of the bool one."""
    assert polling.until is wait_until_async
    assert poll_async is not wait_until_async


class Refused(RuntimeError):
    pass


def test_the_error_type_and_the_last_state_seen_are_the_callers() -> None:
    seen = {"state": "starting"}
    with pytest.raises(Refused, match=r"waiting for the node \(last: starting\)"):
        wait_until(lambda: False, 0.05, lambda: f"the node (last: {seen['state']})", poll_s=0.01, error=Refused)


def test_poll_value_returns_the_last_value_read_at_the_deadline_or_once_done() -> None:
    reads = iter(range(1000))
    assert poll_value(lambda: next(reads), lambda n: n >= 3, 5, poll_s=0.001) == 3
    last = poll_value(lambda: next(reads), lambda n: False, 0.05, poll_s=0.01)
    assert 4 <= last < 1000


def test_every_runs_the_body_for_its_duration() -> None:
    started = time.monotonic()
    elapsed = list(every(0.01, 0.1))
    took_s = time.monotonic() - started
    assert elapsed[0] < 0.05 and all(a < b for a, b in itertools.pairwise(elapsed))
    assert 0.1 <= took_s < 2, (
        f"every(0.01, 0.1) took {took_s:.3f} s; the bounds are its 0.1 s and a loaded machine's slack (2 s)"
    )


def test_the_async_twins_take_ignoring_and_read_coroutines() -> None:
    async def scenario() -> None:
        calls: list[int] = []

        def flaky() -> int:
            calls.append(1)
            if len(calls) < 3:
                raise ConnectionError("still starting")
            return len(calls)

        assert await wait_until_async(flaky, 5, "the endpoint", poll_s=0.001, ignoring=(ConnectionError,)) == 3
        count = iter(range(100))

        async def read() -> int:
            return next(count)

        assert await poll_value_async(read, lambda n: n == 2, 5, poll_s=0.001) == 2

    asyncio.run(scenario())


def test_every_pauses_after_the_body_unless_it_catches_up() -> None:
    """A 30 ms body with a 20 ms period: every round at least 50 ms, or shorter on a schedule that catches up."""

    def gaps(catch_up: bool) -> list[float]:
        stamps = []
        for elapsed_s in every(0.02, 0.4, catch_up=catch_up):
            stamps.append(elapsed_s)
            time.sleep(0.03)
        return [b - a for a, b in itertools.pairwise(stamps)]

    paused, caught_up = gaps(catch_up=False), gaps(catch_up=True)
    assert min(paused) >= 0.049, f"shortest round {min(paused) * 1000:.1f} ms < the body's 30 ms + the period's 20 ms"
    mean_paused, mean_caught_up = sum(paused) / len(paused), sum(caught_up) / len(caught_up)
    assert mean_caught_up < mean_paused, (
        f"catching up: {mean_caught_up * 1000:.1f} ms a round, not below the paused {mean_paused * 1000:.1f} ms "
        "(the schedule skips the pause a 30 ms body already covered)"
    )
