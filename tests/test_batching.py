"""The batching layer (:class:`solutions.batching.Coalescer`): one flush for many callers, and a
failed flush reaches every one of them."""

from __future__ import annotations

import asyncio

import pytest
from billing_support import until

from solutions.batching import Coalescer


class Recorder:
    """A flush that records its batches; it fails while ``fail`` is set, and waits on ``gate``."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()

    async def flush(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [item * 10 for item in items]


def test_concurrent_callers_share_one_flush_and_each_gets_its_own_results() -> None:
    async def scenario() -> tuple[list[list[int]], list[list[int]]]:
        recorder = Recorder()
        batch = Coalescer("test", recorder.flush)
        results = await asyncio.gather(batch.submit([1, 2]), batch.submit([3]), batch.submit([4, 5, 6]))
        return recorder.batches, list(results)

    batches, results = asyncio.run(scenario())
    assert batches == [[1, 2, 3, 4, 5, 6]]
    assert results == [[10, 20], [30], [40, 50, 60]]


def test_a_failed_flush_reaches_every_caller_of_the_batch() -> None:
    async def scenario() -> list[object]:
        recorder = Recorder()
        recorder.fail = RuntimeError("database is locked")
        batch = Coalescer("test", recorder.flush)
        outcomes = await asyncio.gather(*(batch.submit([i]) for i in range(5)), return_exceptions=True)
        assert recorder.batches == [[0, 1, 2, 3, 4]]
        recorder.fail = None  # the next flush is a new batch and succeeds
        outcomes.append(await batch.submit([7]))
        return outcomes

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, RuntimeError) and "locked" in str(o) for o in outcomes[:5]), outcomes
    assert outcomes[5] == [70]


def test_callers_arriving_during_a_flush_wait_for_the_next_one() -> None:
    async def scenario() -> list[list[int]]:
        recorder = Recorder()
        recorder.gate.clear()
        batch = Coalescer("test", recorder.flush)
        first = asyncio.ensure_future(batch.submit([1]))
        await until(lambda: recorder.batches, 5, "the first flush (held at the gate)")
        later = [asyncio.ensure_future(batch.submit([i])) for i in (2, 3)]
        await until(lambda: batch.pending == 3, 5, "two more callers queued")
        assert recorder.batches == [[1]]
        recorder.gate.set()
        assert await first == [10] and [await f for f in later] == [[20], [30]]
        return recorder.batches

    assert asyncio.run(scenario()) == [[1], [2, 3]]


def test_max_batch_splits_between_whole_calls() -> None:
    async def scenario() -> list[list[int]]:
        recorder = Recorder()
        batch = Coalescer("test", recorder.flush, max_batch=3)
        await asyncio.gather(batch.submit([1, 2]), batch.submit([3, 4]), batch.submit([5]))
        return recorder.batches

    assert asyncio.run(scenario()) == [[1, 2, 3, 4], [5]]


def test_a_flush_returning_the_wrong_number_of_results_fails_every_caller() -> None:
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    async def scenario() -> None:
        batch = Coalescer("test", short)
        with pytest.raises(ValueError, match="2 results for 3 items"):
            await asyncio.gather(batch.submit([1, 2]), batch.submit([3]))

    asyncio.run(scenario())


def test_a_cancelled_caller_still_has_its_items_flushed_and_wait_idle_waits_for_it() -> None:
    """What shutdown relies on: cancelling a caller does not cancel the flush it joined."""

    async def scenario() -> tuple[list[list[int]], bool, bool]:
        recorder = Recorder()
        recorder.gate.clear()
        batch = Coalescer("test", recorder.flush)
        caller = asyncio.ensure_future(batch.submit([1, 2]))
        await until(lambda: recorder.batches, 5, "the flush (held at the gate)")
        caller.cancel()
        busy = await batch.wait_idle(0.05)  # the flush is held at the gate: not idle yet
        asyncio.get_running_loop().call_later(0.05, recorder.gate.set)
        idle = await batch.wait_idle(5)
        return recorder.batches, busy, idle

    batches, busy, idle = asyncio.run(scenario())
    assert batches == [[1, 2]]
    assert busy is False and idle is True



class NowRecorder(Recorder):
    """A flush that can also be done at once (``now``), unless ``would_wait`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.now_batches: list[list[int]] = []
        self.would_wait = False

    def now(self, items: list[int]) -> list[int] | None:
        if self.would_wait:
            return None
        self.now_batches.append(items)
        return [item * 10 for item in items]


def test_a_lone_caller_is_flushed_now_in_its_own_task() -> None:
    """The ledger's commits: nothing queued and nothing on its way, so ``now`` runs in the caller's
    task and the coalescer starts no task of its own."""

    async def scenario() -> tuple[list[int], NowRecorder, bool]:
        recorder = NowRecorder()
        batch = Coalescer("test", recorder.flush, now=recorder.now)
        results = await batch.submit([1, 2])
        return results, recorder, batch._runner is None

    results, recorder, no_task = asyncio.run(scenario())
    assert results == [10, 20] and recorder.now_batches == [[1, 2]] and recorder.batches == [] and no_task


def test_when_now_would_wait_the_items_take_the_queue() -> None:
    async def scenario() -> tuple[list[int], NowRecorder]:
        recorder = NowRecorder()
        recorder.would_wait = True  # another process holds the ledger's lock
        batch = Coalescer("test", recorder.flush, now=recorder.now)
        return await batch.submit([3]), recorder

    results, recorder = asyncio.run(scenario())
    assert results == [30] and recorder.now_batches == [] and recorder.batches == [[3]]


def test_while_a_flush_is_on_its_way_callers_queue_behind_it_and_not_now() -> None:
    """``now`` only when the coalescer is idle: a caller never overtakes a flush on its way, and
    one flush runs at a time."""

    async def scenario() -> tuple[NowRecorder, list[list[int]]]:
        recorder = NowRecorder()
        recorder.would_wait = True
        recorder.gate.clear()
        batch = Coalescer("test", recorder.flush, now=recorder.now)
        first = asyncio.ensure_future(batch.submit([1]))
        await until(lambda: recorder.batches, 5, "the queued flush (held at the gate)")
        recorder.would_wait = False
        later = [asyncio.ensure_future(batch.submit([i])) for i in (2, 3)]
        await until(lambda: batch.pending == 3, 5, "two more callers queued")
        assert recorder.now_batches == []
        recorder.gate.set()
        results = [await first, *[await f for f in later]]
        results.append(await batch.submit([4]))  # idle again: now
        return recorder, results

    recorder, results = asyncio.run(scenario())
    assert recorder.batches == [[1], [2, 3]] and recorder.now_batches == [[4]]
    assert results == [[10], [20], [30], [40]]


def test_a_caller_cancelled_before_now_flushes_nothing() -> None:
    async def scenario() -> tuple[NowRecorder, bool]:
        recorder = NowRecorder()
        batch = Coalescer("test", recorder.flush, now=recorder.now)
        caller = asyncio.ensure_future(batch.submit([1]))
        await asyncio.sleep(0)  # the caller is in its yield before ``now``
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        return recorder, batch.idle

    recorder, idle = asyncio.run(scenario())
    assert recorder.now_batches == [] and recorder.batches == [] and idle
