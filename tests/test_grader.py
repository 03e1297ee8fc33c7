"""labs.grading.grader's child processes: a child past its limit is killed, its exit code is the verdict."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from labs.grading import grader

pytestmark = pytest.mark.timeout(60)


def test_a_child_past_its_limit_is_killed_and_reported_as_none() -> None:
    ctx = multiprocessing.get_context("fork")  # the grader's forkserver is exercised by tests/test_grading.py
    called = []
    assert grader.run_child(ctx, os._exit, (0,), 60.0, lambda: called.append(False)) is True
    started = time.monotonic()
    assert grader.run_child(ctx, time.sleep, (60,), 1.0, lambda: called.append(True)) is None
    assert called and time.monotonic() - started < 15
    assert grader.run_child(ctx, os._exit, (3,), 30.0, lambda: called.append(False)) is False
    assert called == [True]
