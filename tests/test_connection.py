"""Error classification and backoff: what a failover throws at the worker, and no hot loop."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import ConnectionError, ReadOnlyError, ResponseError, TimeoutError

from solutions.connection import Backoff, MasterFollowingConnection, Streak, classify, connect, describe


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ResponseError("NOGROUP No such key 'orders' or consumer group 'billing'"), "nogroup"),
        (ResponseError("UNBLOCKED the connection was unblocked"), "recoverable"),
        (ReadOnlyError("READONLY You can't write against a read only replica."), "recoverable"),
        (ResponseError("LOADING Redis is loading the dataset in memory"), "recoverable"),
        (ConnectionError("Connection reset by peer"), "recoverable"),
        (TimeoutError("Timeout reading from socket"), "recoverable"),
        (MasterNotFoundError("No master found for 'mymaster'"), "recoverable"),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), "fatal"),
        (ValueError("bug"), "fatal"),
    ],
)
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc) == kind


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    backoff = Backoff(base_s=0.1, cap_s=2.0)
    delays = [backoff.next_delay_s() for _ in range(10)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(d <= 2.0 for d in delays) and delays[-1] >= 1.0
    backoff.reset()
    assert backoff.next_delay_s() <= 0.1


def test_client_timeouts_and_retry() -> None:
    client = connect(redis_url="redis://127.0.0.1:6390/0", socket_timeout_s=5.0)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 5.0
    assert client.get_retry() is not None


def test_a_sentinel_client_reconnects_through_sentinel_on_every_retry() -> None:
    """redis-py #3874: its retry loop reconnects to the last address; ours asks Sentinel again."""
    client = connect(redis_url="", sentinels=(("127.0.0.1", 26390),), master_name="m", socket_timeout_s=2.0)
    assert client.connection_pool.connection_class is MasterFollowingConnection


def test_describe_names_the_error_and_its_reason() -> None:
    exc = ConnectionError("Error 111 connecting to 127.0.0.1:1.\nConnection refused.")
    assert describe(exc) == "ConnectionError: Error 111 connecting to 127.0.0.1:1. Connection refused."
    assert describe(TimeoutError()) == "TimeoutError"


def test_streak_logs_a_run_of_failures_once_and_the_recovery(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.streak")
    caplog.set_level(logging.INFO, logger="test.streak")
    streak = Streak(log, "XREADGROUP", every_s=3600)
    for _ in range(20):
        streak.failed(ConnectionError("refused"))
    streak.recovered()
    streak.recovered()
    assert [r.getMessage().split(" after ")[0] for r in caplog.records] == [
        "XREADGROUP failed, retrying with backoff: ConnectionError: refused",
        "XREADGROUP works again",
    ]
    assert "after 20 failed attempts" in caplog.records[-1].getMessage()
