"""The persistence experiment: acknowledged writes, ``kill -9``, restart, count what survived.

The producer's record is the list of stream IDs the server returned for its ``XADD`` calls:
an ID in hand means the server acknowledged that write. After the kill and the restart we
look those IDs up again, so "survived" is counted against an independent record rather than
read off a counter that died with the process.

What a ``kill -9`` of the *process* can and cannot lose:

- ``single`` (``appendonly no``, ``save ""``) keeps nothing on disk, so a restart comes up
  empty: every acknowledged write is lost.
- ``aof`` (``appendonly yes``, ``appendfsync everysec``) ``write()``s the AOF buffer to the
  file before it sends the replies of that event-loop turn, and ``fsync()``s it once a second
  in a background thread. A killed process leaves its written pages in the OS page cache, so
  what was acknowledged normally survives even with no wait at all; the one-second window of
  ``everysec`` is about a crash of the machine (power, kernel), which loses what was written
  but not yet fsynced. :func:`kill_and_count` waits ``fsync_wait_s`` first so that the result
  holds for both kinds of crash.

Why ``kill -9`` and not a polite stop: :func:`stop_and_count` stops a throwaway server
gracefully (``SIGTERM``, the same as ``SHUTDOWN``). With Redis's default ``save`` rules a
graceful stop writes an RDB snapshot first, so the data "survives" with AOF off, and the
experiment would prove nothing about AOF. Only ``save ""`` (no save points) stops without one.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from labs.launcher import binaries, ports
from labs.launcher.process import RedisProcess
from labs.launcher.topology import Topology

log = logging.getLogger(__name__)

BATCH = 200
FIELD = "seq"


@dataclass(frozen=True)
class SurvivalResult:
    """What one ``kill -9`` left of the acknowledged writes."""

    topology: str
    acknowledged: int
    survived: int
    lost: int
    elapsed_s: float


def write_acknowledged(client: redis.Redis, stream: str, n_writes: int) -> list[str]:
    """``XADD`` ``n_writes`` entries (pipelined in batches); return the IDs the server acknowledged.

    A reply that is an error (or no reply) is not counted: only an ID is an acknowledgement.
    """
    ids: list[str] = []
    for start in range(0, n_writes, BATCH):
        pipe = client.pipeline(transaction=False)
        for seq in range(start, min(start + BATCH, n_writes)):
            pipe.xadd(stream, {FIELD: seq})
        replies = pipe.execute(raise_on_error=False)
        ids.extend(_as_text(reply) for reply in replies if isinstance(reply, bytes | str))
    return ids


def count_present(client: redis.Redis, stream: str, ids: Sequence[str]) -> int:
    """How many of ``ids`` the stream holds (``XRANGE`` over their span, in pages)."""
    if not ids:
        return 0
    wanted = set(ids)
    found = 0
    cursor, last = ids[0], ids[-1]
    while True:
        page = client.xrange(stream, min=cursor, max=last, count=1000)
        if not page:
            return found
        found += sum(1 for entry_id, _ in page if _as_text(entry_id) in wanted)
        cursor = "(" + _as_text(page[-1][0])


def aof_pending(client: redis.Redis) -> dict[str, int]:
    """The AOF's unwritten buffer and pending background fsyncs (``INFO persistence``)."""
    info = client.info("persistence")
    return {
        "aof_enabled": int(info.get("aof_enabled", 0)),
        "aof_buffer_length": int(info.get("aof_buffer_length", 0)),
        "aof_pending_bio_fsync": int(info.get("aof_pending_bio_fsync", 0)),
    }


def kill_and_count(topology: Topology, *, stream: str, n_writes: int, fsync_wait_s: float = 1.5) -> SurvivalResult:
    """Write ``n_writes`` acknowledged ``XADD``s, wait, ``kill -9`` the server, restart it, count.

    ``topology`` is a started ``single`` or ``aof`` topology; it is restarted with
    :meth:`Topology.ensure` (same config, same data directory), so it is running afterwards.
    ``fsync_wait_s`` is the pause between the last acknowledgement and the kill (``everysec``
    needs its second); 0 kills right after the writes.
    """
    if n_writes < 1:
        raise ValueError(f"n_writes must be positive, got {n_writes}")
    started = time.monotonic()
    with contextlib.closing(redis.Redis.from_url(topology.url)) as client:
        ids = write_acknowledged(client, stream, n_writes)
        if fsync_wait_s > 0:
            time.sleep(fsync_wait_s)  # the experiment's parameter, not a wait for a condition
    topology.kill(sig=signal.SIGKILL)  # returns once the process is gone and its port closed
    topology.ensure()
    with contextlib.closing(redis.Redis.from_url(topology.url)) as client:
        survived = count_present(client, stream, ids)
    result = SurvivalResult(
        topology=topology.name,
        acknowledged=len(ids),
        survived=survived,
        lost=len(ids) - survived,
        elapsed_s=time.monotonic() - started,
    )
    log.info(
        "kill -9 of %s after %s acknowledged XADDs (wait %.1f s): %s survived, %s lost",
        result.topology,
        result.acknowledged,
        fsync_wait_s,
        result.survived,
        result.lost,
    )
    return result


@dataclass(frozen=True)
class StopResult:
    """What a graceful stop (``SIGTERM``) and a restart left of the acknowledged writes, AOF off."""

    save: str  # the server's ``save`` setting ('' = no save points)
    acknowledged: int
    survived: int
    rdb_bytes: int  # size of dump.rdb after the stop (0: none written)


def stop_and_count(home: Path, *, default_save: bool, n_writes: int = 100) -> StopResult:
    """A throwaway ``redis-server`` (free port, ``appendonly no``): write, ``SIGTERM``, restart, count.

    ``default_save=True`` leaves ``save`` out of the config, so Redis's default save rules
    apply; ``False`` writes ``save ""``. The server is killed afterwards.
    """
    port = ports.free_port()
    proc = RedisProcess(f"stop-{port}", port, home, binaries.require("redis-server"))
    home.mkdir(parents=True, exist_ok=True)
    save_line = "" if default_save else 'save ""\n'
    proc.conf.write_text(f'port {port}\nbind 127.0.0.1\ndir "{proc.data_dir}"\nappendonly no\n{save_line}')
    proc.start("a free port")
    try:
        with contextlib.closing(proc.client(5.0)) as client:
            save = str(client.config_get("save")["save"])
            ids = write_acknowledged(client, "orders", n_writes)
        proc.kill(signal.SIGTERM)  # graceful: the same path as SHUTDOWN
        rdb = proc.data_dir / "dump.rdb"
        rdb_bytes = rdb.stat().st_size if rdb.exists() else 0
        proc.start("a free port")
        with contextlib.closing(proc.client(5.0)) as client:
            survived = count_present(client, "orders", ids)
    finally:
        proc.kill(signal.SIGKILL)
    result = StopResult(save=save, acknowledged=len(ids), survived=survived, rdb_bytes=rdb_bytes)
    log.info("graceful stop with save=%r: %s", save, result)
    return result


def _as_text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
