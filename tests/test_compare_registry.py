"""labs.compare.registry and the Redis adapter's outcome rule: one registry of rows, and a send's
outcome that agrees with the worker's own Sender (solutions.sender) for every failure it sorts."""

from __future__ import annotations

import argparse
import asyncio
from types import TracebackType
from typing import cast

import pytest
from redis.exceptions import BusyLoadingError, ConnectionError, ReadOnlyError, RedisError, TimeoutError

from labs.compare.contract import Event, Outcome, Settings
from labs.compare.redis_broker import RedisBroker
from labs.compare.registry import KINDS, ROWS, make_broker
from labs.compare.sites import CLUSTERS
from solutions.connection import Client
from solutions.sender import Sender

pytestmark = pytest.mark.timeout(30)


def test_every_row_names_a_cluster_that_can_be_started_and_builds_its_adapter() -> None:
    for kind in KINDS:
        assert ROWS[kind].cluster in CLUSTERS, kind
    address = {"sentinels": [["127.0.0.1", 1]], "urls": ["nats://127.0.0.1:1"], "copies": 3}
    assert make_broker("redis+WAIT", address, "q", Settings()).name == "redis+WAIT"  # type: ignore[arg-type]  # a literal address
    with pytest.raises(ValueError, match="unknown broker"):
        make_broker("kafka", {}, "q", Settings())


class _Pipe:
    """A pipeline whose execute raises what a failing Redis raised (the rule is the subject, not Redis)."""

    def __init__(self, error: BaseException | None, replies: list[object]) -> None:
        self.error, self.replies = error, replies

    async def __aenter__(self) -> _Pipe:
        return self

    async def __aexit__(self, *exc: tuple[type[BaseException], BaseException, TracebackType]) -> None:
        return None

    def xadd(self, *args: object, **kwargs: object) -> None:
        return None

    def wait(self, *args: object) -> None:
        return None

    async def execute(self, raise_on_error: bool = True) -> list[object]:
        if self.error is not None:
            raise self.error
        return self.replies


class _Client:
    def __init__(self, error: BaseException | None, replies: list[object]) -> None:
        self.error, self.replies = error, replies

    def pipeline(self, transaction: bool = True) -> _Pipe:
        return _Pipe(self.error, self.replies)


@pytest.mark.parametrize(("error", "replies"), [
    (BusyLoadingError("LOADING Redis is loading the dataset in memory"), []),
    (ConnectionError("Connection reset by peer"), []),
    (TimeoutError("Timeout reading from socket"), []),
    (None, [ReadOnlyError("READONLY You can't write against a read only replica."), 1]),
    (None, [b"1-0", 0]),  # on the master, no replica acked in time
    (None, [b"1-0", 1]),
])
def test_a_send_has_the_same_outcome_in_the_adapter_as_in_the_workers_sender(error: RedisError | None,
                                                                            replies: list[object]) -> None:
    settings = Settings(wait_replicas=1)
    broker = RedisBroker([("127.0.0.1", 1)], "orders", settings, name="redis+WAIT")
    client = cast("Client", _Client(error, replies))  # the stand-in above: pipeline() is all the rule calls
    broker._client = client
    args = argparse.Namespace(stream="orders", maxlen=None, wait_replicas=1, wait_timeout_ms=100, resend=0)
    broker._sender = Sender(client, args, None)
    event = Event("e1", "o1", "10.00")
    single = asyncio.run(broker.publish(event))
    (windowed,) = asyncio.run(broker.publish_window([event]))
    workers = asyncio.run(Sender(client, args, None).attempt(broker._fields(event))).status
    assert single.value == workers == windowed.value, (single, workers, windowed)
    if isinstance(error, BusyLoadingError):
        assert single is Outcome.REFUSED  # LOADING: nothing was executed, the worker says refused
