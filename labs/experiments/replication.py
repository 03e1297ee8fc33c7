"""Asynchronous replication measured: a cut replica link, ``WAIT``, and the tail a failover loses.

A master acknowledges a write as soon as it has applied it; the replica receives it later
over the replication link. To show the window without racing the network we *cut* the link
on purpose (:func:`replica_cut`): the replica process is frozen with ``SIGSTOP`` and the
master drops its connection (``CLIENT KILL TYPE replica``), so new writes stay on the master
only (in its replication backlog) until the link comes back. Freezing alone is not enough:
the kernel would still buffer the master's stream in the frozen replica's socket, and the
replica would read it after ``SIGCONT``.

:func:`failover_tail_loss` then kills the master while the link is cut, lets Sentinel
promote the replica, and counts, against the producer's own list of acknowledged IDs, what
the new master has.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import redis

from labs.experiments.persistence import count_present, write_acknowledged
from labs.launcher.errors import LauncherError
from labs.launcher.process import POLL_S, RedisProcess
from labs.launcher.topology import QUORUM, Address, SentinelTopology
from labs.polling import wait_until

log = logging.getLogger(__name__)

FAILOVER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TailLossResult:
    """One failover with an unreplicated tail, counted."""

    before: int  # acknowledged while the replica was linked (and confirmed by WAIT)
    tail: int  # acknowledged while the link was cut
    wait_before: int  # WAIT's reply after the linked writes
    wait_tail: int  # WAIT's reply after the tail
    before_survived: int  # of ``before``, found on the new master
    tail_survived: int  # of ``tail``, found on the new master
    old_master: Address
    new_master: Address
    failover_s: float  # from the kill until a quorum of sentinels (on a cluster: every live node) names the new master
    tail_ids: tuple[str, ...] = field(default=(), repr=False)  # the producer's record of the tail


def wait_replicas(client: redis.Redis, num_replicas: int, timeout_ms: int) -> int:
    """``WAIT num_replicas timeout_ms``: how many replicas acknowledged this client's writes."""
    return int(client.wait(num_replicas, timeout_ms))


def linked_replicas(client: redis.Redis) -> int:
    """``INFO replication`` on a master: ``connected_slaves``."""
    return int(client.info("replication").get("connected_slaves", 0))


def replicas_online(client: redis.Redis) -> int:
    """``INFO replication`` on a master: replicas in state ``online`` (their initial sync is done)."""
    info = client.info("replication")
    return sum(1 for key, value in info.items() if key.startswith("slave") and _state(value) == "online")


def wait_replicas_online(topology: SentinelTopology, timeout_s: float = 30.0) -> float:
    """Wait until every running replica has finished its sync with the master; return the wait in s.

    A replica counts as connected as soon as it asks for a sync, but it holds nothing until
    the full sync is done, and the master starts a diskless sync only after
    ``repl-diskless-sync-delay`` (5 s by default, to serve several replicas with one
    transfer). As a lab shortcut the delay is set to 0 on every server (``CONFIG SET``).
    """
    started = time.monotonic()
    for proc in topology.servers:
        if proc.pid() is not None:
            with contextlib.closing(proc.client()) as client:
                client.config_set("repl-diskless-sync-delay", 0)
    expected = sum(1 for proc in topology.servers if proc.pid() is not None) - 1
    master = topology.server(topology.master_addr()[1])
    with contextlib.closing(master.client()) as client:
        _poll(lambda: replicas_online(client) >= expected, timeout_s, f"{expected} replica(s) to be online")
    return time.monotonic() - started


def replica_of(topology: SentinelTopology) -> RedisProcess:
    """The first running redis-server of ``topology`` that is not its current master."""
    master_port = topology.master_addr()[1]
    for proc in topology.servers:
        if proc.port != master_port and proc.pid() is not None:
            return proc
    raise LauncherError(f"the {topology.name} topology has no running replica")


@contextlib.contextmanager
def replica_cut(topology: SentinelTopology, timeout_s: float = 5.0) -> Iterator[RedisProcess]:
    """Freeze the replica (``SIGSTOP``) and drop its link on the master (``CLIENT KILL TYPE replica``).

    Inside the block the master acknowledges writes that no replica receives. On exit the
    replica is resumed (``SIGCONT``) and reconnects by itself, to the master if it still runs.
    """
    wait_replicas_online(topology, timeout_s)
    master = topology.server(topology.master_addr()[1])
    with link_cut(master, replica_of(topology), timeout_s) as replica:
        yield replica


@contextlib.contextmanager
def link_cut(master: RedisProcess, replica: RedisProcess, timeout_s: float = 5.0) -> Iterator[RedisProcess]:
    """:func:`replica_cut` for a given master and replica (a cluster has one pair per shard)."""
    pid = replica.pid()
    if pid is None:
        raise LauncherError(f"{replica.name} is not running")
    os.kill(pid, signal.SIGSTOP)
    try:
        with contextlib.closing(master.client()) as client:
            client.client_kill_filter(_type="replica")
            _poll(lambda: linked_replicas(client) == 0, timeout_s, "the master to drop its replica")
        log.info("replica %s frozen and unlinked from master %s", replica.name, master.name)
        yield replica
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        log.info("replica %s resumed", replica.name)


def failover_tail_loss(
    topology: SentinelTopology, *, stream: str, n_before: int, n_tail: int, wait_timeout_ms: int = 100
) -> TailLossResult:
    """Write linked, cut the link, write the tail, ``kill -9`` the master, let Sentinel promote, count.

    ``topology`` is a started ``sentinel`` topology. Afterwards its old master is down and
    the promoted replica is the master; :func:`rejoin_old_master` brings the old one back
    (safely: only once every sentinel has switched).
    """
    wait_replicas_online(topology)
    old = topology.master_addr()
    master, replica = topology.server(old[1]), replica_of(topology)
    writes = write_tail_and_kill(
        master, replica, stream=stream, n_before=n_before, n_tail=n_tail, wait_timeout_ms=wait_timeout_ms
    )
    new = topology.wait_new_master(old, time.monotonic() + FAILOVER_TIMEOUT_S)
    result = count_tail(topology.server(new[1]), stream, writes, old, new)
    log.info("failover %s -> %s in %.1f s: %s", old, new, result.failover_s, result)
    return result


@dataclass(frozen=True)
class TailWrites:
    """The producer's record: IDs acknowledged while linked and while cut, WAIT's replies, the kill time."""

    before_ids: list[str]
    tail_ids: list[str]
    wait_before: int
    wait_tail: int
    killed_at: float  # time.monotonic()


def write_tail_and_kill(
    master: RedisProcess, replica: RedisProcess, *, stream: str, n_before: int, n_tail: int, wait_timeout_ms: int = 100
) -> TailWrites:
    """Write ``n_before`` linked, ``WAIT 1``, cut the link, write ``n_tail``, ``WAIT 1``, SIGKILL ``master``."""
    with contextlib.closing(master.client()) as client:
        before_ids = write_acknowledged(client, stream, n_before)
        wait_before = wait_replicas(client, 1, 5000)
        with link_cut(master, replica):
            tail_ids = write_acknowledged(client, stream, n_tail)
            wait_tail = wait_replicas(client, 1, wait_timeout_ms)
            killed_at = time.monotonic()
            master.kill(signal.SIGKILL)
    return TailWrites(before_ids, tail_ids, wait_before, wait_tail, killed_at)


def count_tail(new_master: RedisProcess, stream: str, writes: TailWrites, old: Address, new: Address) -> TailLossResult:
    """Count on the promoted master which of the producer's acknowledged writes it has (now: the failover's end)."""
    failover_s = time.monotonic() - writes.killed_at
    with contextlib.closing(new_master.client()) as client:
        return TailLossResult(
            before=len(writes.before_ids),
            tail=len(writes.tail_ids),
            wait_before=writes.wait_before,
            wait_tail=writes.wait_tail,
            before_survived=count_present(client, stream, writes.before_ids),
            tail_survived=count_present(client, stream, writes.tail_ids),
            old_master=old,
            new_master=new,
            failover_s=failover_s,
            tail_ids=tuple(writes.tail_ids),
        )


@dataclass(frozen=True)
class RejoinResult:
    """The old master back from its own AOF, before and after it resyncs with the new master."""

    tail_after_restart: int  # tail entries the old master reloaded from its AOF
    tail_after_resync: int  # tail entries left once it has synced as a replica
    rejoin_s: float  # from its restart to a finished sync with the new master


def rejoin_old_master(
    topology: SentinelTopology, old: Address, *, stream: str, tail_ids: Sequence[str], timeout_s: float = 40.0
) -> RejoinResult:
    """Restart the killed master, count the tail it reloads, wait until Sentinel makes it a replica.

    Sentinel waits several seconds before it reconfigures a returning old master
    (``REPLICAOF`` plus ``CONFIG REWRITE``); the full resync that follows replaces its data
    set with the new master's. The new master's ``repl-diskless-sync-delay`` is set to 0
    (``CONFIG SET``) so that the sync starts at once instead of after the default 5 s.
    """
    started = time.monotonic()
    # Restart only once every sentinel has switched and pinged the new master: a sentinel that
    # has not would still flag it down and could promote the returning old master instead.
    new = topology.wait_switched(old, started + timeout_s)
    proc = topology.server(old[1])
    topology.start(proc)
    with contextlib.closing(proc.client()) as client:
        after_restart = count_present(client, stream, tail_ids)
        with contextlib.closing(topology.server(new[1]).client()) as master:
            master.config_set("repl-diskless-sync-delay", 0)
        _poll(lambda: _rejoined(topology, old, client), timeout_s, f"{proc.name} to resync as a replica")
        after_resync = count_present(client, stream, tail_ids)
    topology.wait_ready(timeout_s)
    return RejoinResult(after_restart, after_resync, time.monotonic() - started)


def _rejoined(topology: SentinelTopology, old: Address, client: redis.Redis) -> bool:
    if sum(1 for view in topology.sentinel_views() if view == old) >= QUORUM:
        raise LauncherError(
            f"the sentinels failed over a second time and made the old master {old} the master again; "
            "a sentinel flagged the new master down before its first PING (down-after close to 1 s)"
        )
    return _synced_replica(client)


def _synced_replica(client: redis.Redis) -> bool:
    try:
        info = client.info("replication")
    except redis.RedisError:
        return False
    return (
        info.get("role") == "slave"
        and info.get("master_link_status") == "up"
        and int(info.get("master_sync_in_progress", 1)) == 0
    )


def _state(value: object) -> str:
    # redis-py parses "slave0:ip=...,state=online,..." into a dict; be lenient with a raw string.
    if isinstance(value, dict):
        return str(value.get("state", ""))
    return next((part[6:] for part in str(value).split(",") if part.startswith("state=")), "")


def _poll(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    wait_until(check, timeout_s, what, POLL_S, error=LauncherError)
