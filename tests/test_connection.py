"""Error classification and backoff: what a failover throws at the worker, and no hot loop."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from redis.asyncio.connection import Connection
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import ConnectionError, DataError, ReadOnlyError, ResponseError, TimeoutError

from labs.launcher.topology import Topology
from solutions.connection import (
    Backoff,
    Direct,
    HiredisPacking,
    MasterFollowingConnection,
    PackingConnection,
    Streak,
    classify,
    connect,
    describe,
    execute,
)


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


@pytest.mark.slow
@pytest.mark.failover
@pytest.mark.timeout(90)
def test_a_sentinel_client_reconnects_through_sentinel_on_every_retry(sentinel_topology: Topology) -> None:
    """redis-py #3874: its retry loop reconnects to the last address. With the master paused
    (SIGSTOP: it still accepts TCP connections and never answers) that address swallows every
    retry. Ours asks Sentinel on each reconnect: once the replica is promoted, a command sent
    on the client's old pooled connection times out once and its retry lands on the new master."""
    topo = sentinel_topology
    old = topo.master_addr()

    async def scenario() -> None:
        addrs = topo.addresses()
        assert addrs.master_name is not None
        client = connect(redis_url="", sentinels=tuple(addrs.sentinels), master_name=addrs.master_name,
                         socket_timeout_s=0.5)
        assert client.connection_pool.connection_class is MasterFollowingConnection
        try:
            await client.set("before", 1)  # the pool now holds a connection to the old master
            pid = topo.server(old[1]).pid()
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                new = await asyncio.to_thread(topo.wait_new_master, old, time.monotonic() + 30)
                # One command, inside the client's own retries (a plain Sentinel connection
                # spends them all on the paused master and raises TimeoutError).
                await client.set("after", 1)
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            await client.aclose()
        with redis.Redis(host=new[0], port=new[1]) as direct:
            assert direct.get("after") == b"1" and direct.role()[0] == b"master"

    asyncio.run(scenario())


PACKED_ARGS: list[tuple[Any, ...]] = [
    ("XACK", "orders", b"billing", *[f"1700000000000-{i}".encode() for i in range(100)]),
    ("XREADGROUP", "GROUP", "billing", "w-1", "COUNT", 100, "BLOCK", 500, "STREAMS", "orders", ">"),
    (b"XREADGROUP", b"GROUP", "billing", "w-1", b"COUNT", 100, b"STREAMS", "orders", "0"),  # the reader's raw read
    (b"CONFIG GET", "maxmemory"),
    ("SET", "clé", "значение", "EX", 60),
    ("HSET", "h", "f", 1.5, "g", -3, "i", 10**20, "m", memoryview(b"mv")),
    ("SET", "k", bytearray(b"ba")),  # hiredis refuses a bytearray: redis-py's packer takes it
    ("CONFIG GET", "maxmemory"),  # a name with a space: redis-py splits it
    ("set", "k", b"\x00\xff binary"),
]


@pytest.mark.parametrize("args", PACKED_ARGS, ids=lambda args: str(args[0]))
def test_hiredis_packing_sends_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    ours = b"".join(PackingConnection().pack_command(*args))
    assert ours == b"".join(Connection().pack_command(*args))


@pytest.mark.parametrize("bad", [None, True, {"a": 1}])
def test_hiredis_packing_refuses_what_redis_py_refuses(bad: object) -> None:
    with pytest.raises(DataError):
        PackingConnection().pack_command("SET", "k", bad)


def test_clients_pack_with_hiredis_and_round_trip(redis_url: str, key_prefix: str) -> None:
    """Both kinds of client use the packing connection, and a real server reads what it sends."""
    assert issubclass(MasterFollowingConnection, HiredisPacking)

    async def round_trip() -> list[Any]:
        client = connect(redis_url=redis_url)
        try:
            assert client.connection_pool.connection_class is PackingConnection
            await client.set(f"{key_prefix}k", "значение")
            await client.hset(f"{key_prefix}h", mapping={"f": 1.5, "g": 10**20, "b": bytearray(b"ba")})
            return [await client.get(f"{key_prefix}k"), await client.hgetall(f"{key_prefix}h")]
        finally:
            await client.aclose()

    text, fields = asyncio.run(round_trip())
    assert text.decode() == "значение"
    assert fields == {b"f": b"1.5", b"g": b"100000000000000000000", b"b": b"ba"}


def test_direct_keeps_one_connection_and_answers_as_the_client_does(redis_url: str, key_prefix: str) -> None:
    """The hot commands' own connection: the same connection call after call, the client's raw
    replies, an error reply raised as the client raises it (the connection stays), a second
    caller while one is on its way served by the client, and a connection the server killed
    replaced without the caller seeing an error (the client's retry takes that call)."""
    key = f"{key_prefix}direct"

    async def scenario() -> dict[str, Any]:
        client = connect(redis_url=redis_url)
        direct = Direct(client)
        try:
            first = await direct.call("INCR", key)
            held = direct._conn
            second = await direct.call(b"INCR", key)
            same = direct._conn is held
            with pytest.raises(ResponseError, match="NOGROUP"):
                await direct.call("XREADGROUP", "GROUP", "nope", "c", "STREAMS", f"{key_prefix}missing", ">")
            kept = direct._conn is held and held is not None and held.is_connected
            # Two at once: one on the held connection, one through the client.
            both = await asyncio.gather(direct.call("BLPOP", f"{key_prefix}empty", "0.2"), direct.call("INCR", key))
            own_id = await direct.call("CLIENT", "ID")
            killed = await execute(client, "CLIENT", "KILL", "ID", own_id)
            after = await direct.call("INCR", key)
            reconnected = await direct.call("CLIENT", "ID")
            return {"replies": [first, second, *both, after], "same": same, "kept": kept, "killed": killed,
                    "new_id": reconnected != own_id and direct._conn is held}
        finally:
            await client.aclose()

    out = asyncio.run(scenario())
    assert out["replies"] == [1, 2, None, 3, 4]
    assert out["same"] and out["kept"] and out["killed"] == 1 and out["new_id"]


def test_direct_leaves_a_client_with_its_own_execute_command_to_it(redis_url: str, key_prefix: str) -> None:
    """A shard's client follows MOVED and ASK in its execute_command: Direct must not go around it."""
    from solutions.cluster_router import ShardClient

    class Counting(redis.asyncio.Redis):
        calls = 0

        async def execute_command(self, *args: Any, **options: Any) -> Any:
            Counting.calls += 1
            parent: Callable[..., Awaitable[Any]] = super().execute_command  # redis-py leaves it unannotated
            return await parent(*args, **options)

    async def scenario() -> tuple[bool, bool, int, Any]:
        client = Counting.from_url(redis_url)
        try:
            direct = Direct(client)
            reply = await direct.call("INCR", f"{key_prefix}routed")
            return direct.enabled, Direct(connect(redis_url=redis_url)).enabled, Counting.calls, reply
        finally:
            await client.aclose()

    assert ShardClient.execute_command is not redis.asyncio.Redis.execute_command
    enabled, plain_enabled, calls, reply = asyncio.run(scenario())
    assert not enabled and plain_enabled and calls == 1 and reply == 1


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
