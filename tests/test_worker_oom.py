"""The reference worker when its Redis is out of memory (``maxmemory`` + ``noeviction``), on Redis 7.

Each test gets a redis-server of its own (``topology_factory``), fills it with one growing
string (APPEND until OOM) while a backlog of 20 events waits in the stream, then pulls
``maxmemory`` 1 MB below ``used_memory`` so that client buffers coming and going cannot bring
it back under the limit.

What Redis 7.0 refuses (``denyoom``): XADD, SET, and every command queued inside MULTI (Redis 7.4,
redis/redis#12961, and Valkey 8 queue a MULTI that holds no ``denyoom`` command: see
:func:`multi_refused_under_oom`). It
serves XREADGROUP, XACK, XAUTOCLAIM, XCLAIM, XPENDING, DEL, PEXPIRE. EVAL/EVALSHA of a script
without flags (the worker's: no ``#!lua`` line) is judged command by command: its first write
is refused if it is ``denyoom``, but once it has written, later ``denyoom`` writes pass (the
script must stay atomic). A script that declares flags is refused as a whole unless it says
``no-writes`` (or ``allow-oom``), even one that only calls XACK.

So the worker: ``--dedupe redis``/``redis-2phase`` cannot take a marker or a lease and charges
nothing, ``sqlite`` keeps charging (its only Redis write is XACK), the rescuer cannot claim
(its XAUTOCLAIM runs in MULTI) on 7.0 but can on 7.4+ and Valkey 8, the producer's XADD is refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from billing_support import ROOT, charge_counts, pending_ids, produce, running, settings, until
from redis.exceptions import OutOfMemoryError

from labs.launcher.flavours import server_version
from labs.launcher.topology import Topology
from solutions.acks import DEAD_LETTER_LUA, DONE_AND_ACK_LUA
from solutions.handler import BillingHandler
from solutions.idempotency import LEASE_LUA, SET_NX_LUA
from solutions.messages import OrderEvent
from solutions.rescuer import RENEW_LEASE_LUA
from solutions.settings import Settings

pytestmark = [pytest.mark.timeout(90)]

MB = 1024 * 1024
CHUNK = b"x" * (64 * 1024)
FILLER = "cache:filler"
EVENTS = 20
OOM_TEXT = "command not allowed when used memory > 'maxmemory'"
SHEBANG = "#!lua"
XACK_LUA = "return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])"


@pytest.fixture
def url(topology_factory: Callable[..., Topology]) -> str:
    """A redis-server of this test's own: its maxmemory is ours to change."""
    return topology_factory("single").url


@pytest.fixture
def server(url: str) -> Iterator[redis.Redis]:
    """A client of :func:`url`."""
    client = redis.Redis.from_url(url)
    client.config_set("maxmemory-policy", "noeviction")
    yield client
    client.close()


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def fill_memory(client: redis.Redis) -> int:
    """APPEND 64 KB chunks to one key until OOM (2 MB of headroom), then set ``maxmemory`` 1 MB
    below ``used_memory``; returns it. Every ``denyoom`` write is refused from then on."""
    client.config_set("maxmemory", used_memory(client) + 2 * MB)
    for _ in range(64):  # 4 MB: twice the headroom
        try:
            client.append(FILLER, CHUNK)
        except OutOfMemoryError:
            break
    else:
        raise AssertionError("4 MB went into 2 MB of headroom without an OOM")
    limit = used_memory(client) - MB
    client.config_set("maxmemory", limit)
    with pytest.raises(OutOfMemoryError, match=OOM_TEXT):
        client.set("probe", "1")
    return limit


def backlog(client: redis.Redis, s: Settings) -> None:
    """The group and 20 events, written while memory was still there."""
    client.xgroup_create(s.stream, s.group, id="0", mkstream=True)
    produce(client, s.stream, EVENTS)


def all_calls(client: redis.Redis) -> int:
    """Every command the server was sent (``INFO commandstats``: executed plus rejected)."""
    stats = client.info("commandstats").values()
    return sum(int(row.get("calls", 0)) + int(row.get("rejected_calls", 0)) for row in stats)


def times_delivered(client: redis.Redis, s: Settings) -> list[int]:
    return [int(row["times_delivered"]) for row in client.xpending_range(s.stream, s.group, "-", "+", 1000)]


def flags(client: redis.Redis, *names: str) -> dict[str, set[str]]:
    """``COMMAND INFO``: each command's flags."""
    rows: dict[str, dict[str, Any]] = client.execute_command("COMMAND", "INFO", *names)  # parsed by redis-py
    return {name: {str(flag) for flag in row["flags"]} for name, row in rows.items()}


def outcome(call: Callable[[], Any]) -> str:
    """``ok`` or ``OOM``: what the server answered to ``call``."""
    try:
        call()
    except OutOfMemoryError as exc:
        assert OOM_TEXT in str(exc)
        return "OOM"
    return "ok"


# -- 1. what Redis 7.0 refuses over maxmemory ----------------------------------------------------


def multi_refused_under_oom(server: redis.Redis) -> bool:
    """Redis before 7.4 refuses whatever is queued in MULTI over maxmemory; 7.4 and Valkey 8 do not.

    redis/redis#12961 (in 7.4, and in the tree Valkey forked) dropped that rule: a transaction is
    refused only if it holds a ``denyoom`` command, and its size is bounded by the query buffer
    limit instead. Seen in ``make test-matrix``: ``ok`` on Redis 8.2.3 and Valkey 8.0.1.
    """
    info = server.info("server")
    if str(info.get("server_name", "")).lower() == "valkey":
        return server_version(info) < (8, 0, 0)
    return server_version(info) < (7, 4, 0)


def test_denyoom_flags_of_the_commands_the_worker_sends(server: redis.Redis) -> None:
    table = flags(server, "xreadgroup", "xack", "xadd", "set", "eval", "evalsha", "xautoclaim", "xclaim",
                  "xpending", "del", "pexpire")
    assert {name for name, f in table.items() if "denyoom" in f} == {"xadd", "set"}
    assert {"write"} <= table["xreadgroup"] and {"write"} <= table["xack"]  # writes, but no new memory
    assert "write" not in table["eval"]  # a script is judged by the commands it calls


def test_what_the_worker_sends_is_refused_or_served_under_oom(server: redis.Redis) -> None:
    s = settings("redis://unused", "t:", Path("unused"))
    backlog(server, s)
    ids = [i.decode() for i, _ in server.xreadgroup(s.group, "c1", {s.stream: ">"}, count=EVENTS)[0][1]]
    server.set(s.rescuer_lease_key, "c1", px=60_000)  # c1 took the rescuer lease before memory ran out
    fill_memory(server)
    script = server.register_script
    got = {
        "XADD": outcome(lambda: server.xadd(s.stream, {"order_id": "o-x", "amount": "1"})),
        "SET": outcome(lambda: server.set("k", "v")),
        "XREADGROUP": outcome(lambda: server.xreadgroup(s.group, "c1", {s.stream: "0"}, count=1)),
        "XPENDING": outcome(lambda: server.xpending_range(s.stream, s.group, "-", "+", 5)),
        "XACK": outcome(lambda: server.xack(s.stream, s.group, ids[0])),
        "XAUTOCLAIM": outcome(lambda: server.xautoclaim(s.stream, s.group, "c2", 0, count=1)),
        "XCLAIM RETRYCOUNT": outcome(lambda: server.xclaim(s.stream, s.group, "c1", 0, [ids[1]], retrycount=0,
                                                           justid=True)),
        "DEL": outcome(lambda: server.delete("nothing")),
        "EVAL no write": outcome(lambda: server.eval("return 1", 0)),
        # A script that declares flags (a shebang) is judged as a whole: refused unless no-writes.
        "EVAL #!lua, XACK": outcome(lambda: server.eval(f"{SHEBANG}\n{XACK_LUA}", 1, s.stream, s.group, ids[4])),
        "EVAL #!lua, return 1": outcome(lambda: server.eval(f"{SHEBANG}\nreturn 1", 0)),
        "EVAL #!lua flags=no-writes": outcome(lambda: server.eval(f"{SHEBANG} flags=no-writes\nreturn 1", 0)),
        "MULTI XPENDING XAUTOCLAIM (rescuer)": outcome(lambda: _rescuer_transaction(server, s)),
        "SET NX marker script (redis)": outcome(lambda: script(SET_NX_LUA)(keys=["m:1"], args=[1, 60])),
        "lease script (redis-2phase)": outcome(lambda: script(LEASE_LUA)(keys=["m:2"], args=["t", 1000])),
        "rescuer lease, not held": outcome(lambda: script(RENEW_LEASE_LUA)(keys=["other:lease"], args=["c1", 1000])),
        "rescuer lease, held": outcome(lambda: script(RENEW_LEASE_LUA)(keys=[s.rescuer_lease_key],
                                                                          args=["c1", 1000])),
        "XACK then SET done (redis-2phase)": outcome(
            lambda: script(DONE_AND_ACK_LUA)(keys=[s.stream, "m:3"], args=[s.group, 60, b"done", ids[2]])),
        "XACK then XADD to DLQ": outcome(
            lambda: script(DEAD_LETTER_LUA)(keys=[s.stream, s.dlq_stream], args=[s.group, ids[3], b"a", b"1"])),
    }
    multi = "OOM" if multi_refused_under_oom(server) else "ok"
    assert got == {
        "XADD": "OOM", "SET": "OOM", "XREADGROUP": "ok", "XPENDING": "ok", "XACK": "ok", "XAUTOCLAIM": "ok",
        "XCLAIM RETRYCOUNT": "ok", "DEL": "ok", "EVAL no write": "ok",
        "EVAL #!lua, XACK": "OOM", "EVAL #!lua, return 1": "OOM", "EVAL #!lua flags=no-writes": "ok",
        "MULTI XPENDING XAUTOCLAIM (rescuer)": multi,  # 7.0: whatever is queued in MULTI is refused
        "SET NX marker script (redis)": "OOM", "lease script (redis-2phase)": "OOM",
        "rescuer lease, not held": "OOM", "rescuer lease, held": "ok",  # PEXPIRE is not denyoom
        # Once a script has written (XACK), its later denyoom writes pass: the marker and the
        # dead letter are written over maxmemory.
        "XACK then SET done (redis-2phase)": "ok", "XACK then XADD to DLQ": "ok",
    }
    assert server.get("m:3") == b"done" and server.xlen(s.dlq_stream) == 1


def _rescuer_transaction(client: redis.Redis, s: Settings) -> None:
    with client.pipeline(transaction=True) as pipe:
        pipe.xpending_range(s.stream, s.group, "-", "+", 5, idle=0)
        pipe.xautoclaim(s.stream, s.group, "c2", 0, count=5)
        pipe.execute()


# -- 2. Redis dedupe: nothing moves under OOM, everything once after ------------------------------


def oom_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("solutions") and OOM_TEXT in r.getMessage()]


@pytest.mark.parametrize("dedupe", ["redis", "redis-2phase"])
def test_redis_dedupe_waits_out_oom_then_charges_each_event_once(
    dedupe: str, url: str, server: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="solutions")
    s = settings(url, "t:", tmp_path / "ledger.sqlite3", dedupe=dedupe, min_idle_ms=300, claim_interval_ms=200,
                 max_attempts=50)
    backlog(server, s)
    fill_memory(server)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.errors >= EVENTS, 10, "every dedupe check to fail")
            # Over a second and a half: the worker keeps reading, backs off, and moves nothing.
            calls, reads, started = all_calls(server), worker.reader.reads if worker.reader else 0, time.monotonic()
            await until(lambda: time.monotonic() - started >= 1.5, 5, "a second and a half")
            per_s = (all_calls(server) - calls) / (time.monotonic() - started)
            assert worker.reader is not None and worker.reader.reads > reads  # alive, still reading
            assert per_s < 40, f"{per_s:.0f} commands/s under OOM: a hot loop"
            assert worker.counts.acked == 0 and charge_counts(s.ledger) == {}
            assert len(pending_ids(server, s.stream, s.group)) == EVENTS
            assert not server.exists(s.dlq_stream)
            assert max(times_delivered(server, s)) <= 1  # not counted as attempts
            server.config_set("maxmemory", 0)
            await until(lambda: not pending_ids(server, s.stream, s.group), 20, "the backlog after OOM")
            # Redis applies the last XACK before the worker has read its reply and counted it.
            await until(lambda: worker.counts.acked == EVENTS, 5, "the worker to count its last XACK")

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {f"ev-{i}": 1 for i in range(EVENTS)}
    assert not server.exists(s.dlq_stream)
    logged = oom_records(caplog)
    assert 1 <= len(logged) <= 6, [r.getMessage() for r in logged]  # per batch and per streak, not per message
    assert all(r.exc_info is None for r in caplog.records)  # no tracebacks
    assert any("dedupe check of" in r.getMessage() and "not counted as an attempt" in r.getMessage()
               for r in logged)


def test_restarts_under_oom_do_not_spend_the_retry_budget(url: str, server: redis.Redis, tmp_path: Path) -> None:
    """Three lives of one consumer under OOM with ``--max-attempts 2``: each re-reads its own
    pending entries (a delivery each), and no good event is dead-lettered. Before the fix the
    second life dead-lettered all 20 (``dedupe check failed``; the DLQ script's XADD passes)."""
    s = settings(url, "t:", tmp_path / "ledger.sqlite3", dedupe="redis", consumer="billing-1", max_attempts=2)
    backlog(server, s)
    fill_memory(server)

    async def life() -> None:
        async with running(s) as worker:  # each life delivers all 20 again (own pending, id 0) ...
            await until(lambda: worker.counts.errors == EVENTS, 10, "every dedupe check to fail")
            # ... and gives each delivery back: the count Redis keeps stays at 0 attempts
            await until(lambda: times_delivered(server, s) == [0] * EVENTS, 10, "the deliveries given back")

    for _ in range(3):
        asyncio.run(life())
    assert not server.exists(s.dlq_stream) and len(pending_ids(server, s.stream, s.group)) == EVENTS
    server.config_set("maxmemory", 0)

    async def after() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.acked == EVENTS, 10, "the backlog")

    asyncio.run(after())
    assert charge_counts(s.ledger) == {f"ev-{i}": 1 for i in range(EVENTS)}
    assert not server.exists(s.dlq_stream) and not pending_ids(server, s.stream, s.group)


class GatedHandler(BillingHandler):
    """Holds every event in ``process`` until :attr:`gate` opens."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream=stream, delay_ms=0)
        self.gate = asyncio.Event()
        self.entered = 0

    async def process(self, event: OrderEvent) -> None:
        self.entered += 1
        await self.gate.wait()


def test_two_phase_acks_and_marks_done_when_memory_runs_out_after_the_charge(
    url: str, server: redis.Redis, tmp_path: Path
) -> None:
    """The lease is taken, then memory runs out, then the charge commits: the ``done`` markers
    and the XACK must still land. Before the fix (SET before XACK in one script) the whole
    call was refused, the leases expired, and the redelivery charged every event twice."""
    s = settings(url, "t:", tmp_path / "ledger.sqlite3", dedupe="redis-2phase", parallelism=EVENTS, order_key="")
    backlog(server, s)

    async def scenario() -> None:
        handler = GatedHandler(s.stream)
        async with running(s, handler=handler) as worker:
            await until(lambda: handler.entered == EVENTS, 10, "every event leased and in the handler")
            fill_memory(server)
            handler.gate.set()
            await until(lambda: worker.counts.acked == EVENTS, 10, "the charges acked under OOM")
            assert not pending_ids(server, s.stream, s.group)

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {f"ev-{i}": 1 for i in range(EVENTS)}
    assert {server.get(f"{s.dedupe_prefix}ev-{i}") for i in range(EVENTS)} == {b"done"}


# -- 3. SQLite dedupe: XACK is not denyoom -------------------------------------------------------


def test_sqlite_dedupe_keeps_charging_under_oom(url: str, server: redis.Redis, tmp_path: Path) -> None:
    """Its only Redis write is XACK. A poison message still reaches the DLQ: the dead-letter
    script XACKs first, so its XADD passes over maxmemory."""
    s = settings(url, "t:", tmp_path / "ledger.sqlite3", dedupe="sqlite")
    backlog(server, s)
    poison = server.xadd(s.stream, {"type": "order.paid", "order_id": "o-1", "amount": "abc"}).decode()
    limit = fill_memory(server)

    async def scenario() -> None:
        async with running(s) as worker:
            await until(lambda: worker.counts.acked == EVENTS and worker.counts.dead_lettered == 1, 10,
                        "the backlog charged and the poison dead-lettered under OOM")
            assert worker.counts.errors == 0

    asyncio.run(scenario())
    assert charge_counts(s.ledger) == {f"ev-{i}": 1 for i in range(EVENTS)}
    assert not pending_ids(server, s.stream, s.group)
    ((_, dead),) = server.xrange(s.dlq_stream)
    assert dead[b"id"].decode() == poison and dead[b"error"].startswith(b"permanent:")
    assert int(server.config_get("maxmemory")["maxmemory"]) == limit and used_memory(server) > limit  # still full


# -- 4. the producer --------------------------------------------------------------------------------


def test_producer_records_refused_sends_as_refused_in_one_line(
    url: str, server: redis.Redis, tmp_path: Path
) -> None:
    s = settings(url, "t:", tmp_path / "ledger.sqlite3")
    backlog(server, s)
    fill_memory(server)
    log = tmp_path / "sent.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "solutions.producer", "--redis-url", url, "--stream", s.stream, "--rate", "0",
         "--count", "5", "--log", str(log)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1, done.stderr  # none of its sends was confirmed
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    # Refused, not unknown: Redis answered OOM, so the entry is known not to be in the stream.
    assert [(r["status"], r["msg_id"], r["attempt"]) for r in sent] == [("refused", None, 1)] * 5
    assert all(r["error"].startswith("OutOfMemoryError: ") for r in sent)
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    oom_lines = [line for line in lines if OOM_TEXT in line]
    assert len(oom_lines) == 1 and "XADD failed, retrying with backoff: OutOfMemoryError" in oom_lines[0], lines
    assert any("none of the 5 sends was confirmed" in line for line in lines)
    assert server.xlen(s.stream) == EVENTS

