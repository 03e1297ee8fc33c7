"""labs.experiments.read_errors: what the read loop waits out, its backoff, READONLY on a replica."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from billing_support import command
from redis.sentinel import Sentinel

from labs.experiments.idempotency_cases import master_and_replica
from labs.experiments.read_errors import (
    attempts_against_dead_port,
    automatic_retries,
    read_loop,
    readonly_read,
    retryable,
)
from labs.experiments.read_loop import fresh_group
from solutions.connection import Backoff, classify

pytestmark = pytest.mark.timeout(60)


def test_timeout_and_readonly_are_not_connection_errors_but_are_waited_out() -> None:
    assert not issubclass(redis.TimeoutError, redis.ConnectionError)
    assert not issubclass(redis.ReadOnlyError, redis.ConnectionError)
    for exc in (redis.ConnectionError("reset"), redis.TimeoutError("timed out"), redis.ReadOnlyError("READONLY x"),
                redis.ResponseError("UNBLOCKED force unblock"), redis.ResponseError("LOADING dataset")):
        assert retryable(exc) and classify(exc) == "recoverable", exc  # the reference worker agrees
    assert not retryable(redis.ResponseError("WRONGTYPE Operation against a key"))
    assert not retryable(redis.ResponseError("NOGROUP No such key"))


def test_xreadgroup_is_a_write_command(redis_client: redis.Redis) -> None:
    info = command(redis_client, "COMMAND", "INFO", "xreadgroup")
    assert "write" in info["xreadgroup"]["flags"]


def test_xreadgroup_on_a_replica_is_readonly_and_the_loop_waits_it_out(tmp_path: Path) -> None:
    with (
        master_and_replica(tmp_path) as pair,
        contextlib.closing(pair.master.client(2.0)) as master,
        contextlib.closing(pair.replica.client(2.0)) as replica,
    ):
        assert readonly_read(master, replica, "orders") == "ReadOnlyError"
        errors: list[BaseException] = []
        stop = threading.Event()
        threading.Timer(0.6, stop.set).start()
        read_loop(replica, "orders", "reader", lambda i, f: None, stop=stop, backoff=Backoff(), on_error=errors.append)
        assert errors and all(isinstance(e, redis.ReadOnlyError) for e in errors)
        assert len(errors) <= 6  # backed off, not a hot loop


def test_a_bug_is_raised_not_waited_out(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}s"
    redis_client.set(stream, "not a stream")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        read_loop(redis_client, stream, "reader", lambda i, f: None, stop=threading.Event(), backoff=Backoff())


def test_the_loop_hands_over_entries(redis_client: redis.Redis, key_prefix: str) -> None:
    stream = f"{key_prefix}s"
    fresh_group(redis_client, stream, entries=3)
    stop, seen = threading.Event(), []

    def handle(msg_id: str, fields: dict[str, str]) -> None:
        seen.append(fields["n"])
        if len(seen) == 3:
            stop.set()

    read_loop(redis_client, stream, "reader", handle, stop=stop, backoff=Backoff(), block_ms=100)
    assert seen == ["0", "1", "2"]


def test_the_backoff_grows_is_bounded_and_is_no_hot_loop() -> None:
    attempts = attempts_against_dead_port(2.0, Backoff(base_s=0.1, cap_s=0.5))
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert 4 <= len(attempts) <= 10, attempts  # the jitter floor (delay / 2) allows 10 in 2 s at most
    assert gaps[0] < 0.15 and min(gaps[3:]) >= 0.24, gaps  # it grows from 0.05-0.1 s to 0.25-0.5 s ...
    assert max(gaps) < 0.8, gaps  # ... and stays at the 0.5 s cap (plus scheduling slack on a busy machine)


def test_automatic_retries_depend_on_how_the_client_is_made() -> None:
    make_sentinel: Callable[..., Sentinel] = Sentinel  # redis-py leaves Sentinel.__init__ unannotated
    master_for = make_sentinel([("127.0.0.1", 1)]).master_for("mymaster")
    assert automatic_retries(redis.Redis(host="127.0.0.1", port=1)) == 10
    assert automatic_retries(redis.Redis.from_url("redis://127.0.0.1:1/0")) == 0
    assert automatic_retries(master_for) == 0
