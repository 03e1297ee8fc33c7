"""What the sentinels of a topology say: their view of the master, readiness, failover steps.

Free functions over the sentinel and server processes, so that :class:`~labs.launcher.topology.Topology`
stays about lifecycle and each question asked of Sentinel is one small function.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypedDict, Unpack

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.retry import Retry

from labs.launcher.errors import LauncherError
from labs.launcher.process import POLL_S, RedisProcess, command
from labs.polling import poll, poll_value, seconds_left, wait_until

MASTER_NAME = "mymaster"
QUORUM = 2
Address = tuple[str, int]


class Timeouts(TypedDict, total=False):
    """The socket keywords of a redis-py connection (seconds)."""

    socket_timeout: float
    socket_connect_timeout: float


class ClientOptions(Timeouts, total=False):
    """The keywords the labs give a sync client of the master (redis-py's connection keywords)."""

    decode_responses: bool
    retry: Retry


def master_client(
    sentinels: Sequence[Address],
    master_name: str = MASTER_NAME,
    *,
    sentinel_kwargs: Timeouts | None = None,
    **options: Unpack[ClientOptions],
) -> redis.Redis:
    """``Sentinel(sentinels, sentinel_kwargs=..., **options).master_for(master_name)``: a client of the current
    master, asked of the sentinels on every new connection. Without ``sentinel_kwargs`` the sentinels get the
    ``socket_*`` options (redis-py's rule). Typed here: redis-py leaves both calls unannotated."""
    make: Callable[..., redis.sentinel.Sentinel] = redis.sentinel.Sentinel
    watchers = make(list(sentinels), sentinel_kwargs=sentinel_kwargs, **options)
    master_for: Callable[[str], redis.Redis] = watchers.master_for
    return master_for(master_name)


def async_master_client(
    sentinels: Sequence[Address], master_name: str = MASTER_NAME, **options: Unpack[Timeouts]
) -> redis.asyncio.Redis:
    """:func:`master_client` for ``redis.asyncio`` (the sentinels get the same timeouts)."""
    make: Callable[..., redis.asyncio.sentinel.Sentinel] = redis.asyncio.sentinel.Sentinel
    watchers = make(list(sentinels), **options)
    master_for: Callable[[str], redis.asyncio.Redis] = watchers.master_for
    return master_for(master_name)


def sentinel_views(sentinels: Sequence[RedisProcess]) -> list[Address | None]:
    """``SENTINEL GET-MASTER-ADDR-BY-NAME`` on each sentinel (None where one does not answer)."""
    views: list[Address | None] = []
    for proc in sentinels:
        with contextlib.closing(proc.client()) as client:
            try:
                reply = command(client, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
            except redis.RedisError:
                reply = None
        views.append((str(reply[0]), int(reply[1])) if reply else None)
    return views


def quorum_master(sentinels: Sequence[RedisProcess], *, besides: Address | None = None) -> Address | None:
    """The master a quorum of sentinels reports (other than ``besides``), else None."""
    votes = Counter(v for v in sentinel_views(sentinels) if v is not None and v != besides)
    if votes:
        addr, count = votes.most_common(1)[0]
        if count >= QUORUM:
            return addr
    return None


def replicas_online(master: RedisProcess) -> int | str:
    """How many replicas ``INFO replication`` on ``master`` shows with ``state=online`` (or the error)."""
    with contextlib.closing(master.client()) as client:
        try:
            replication = client.info("replication")
        except redis.RedisError as exc:
            return f"master {master.port} does not answer: {exc}"
    return sum(
        1
        for key, value in replication.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


def sentinel_problem(proc: RedisProcess, n_sentinels: int, n_replicas: int, master: Address | None = None) -> str:
    """Why ``SENTINEL MASTER`` (and, given the ``master``, ``SENTINEL REPLICAS``) on ``proc`` shows it is
    not ready yet ('' when it is).

    Knowing the replicas is not enough: Sentinel refreshes a replica's ``INFO`` only every 10 s, so
    for up to 10 s after a replica rejoins (or resyncs) a sentinel may still hold a reply that says
    ``role:master`` or a link down. Such a stale view makes it convert the replica once more, or
    abort a ``SENTINEL FAILOVER`` with no good replica; so every replica must look current to it.
    """
    with contextlib.closing(proc.client()) as client:
        try:
            info = pairs(command(client, "SENTINEL", "MASTER", MASTER_NAME))
            # asked only when the views are wanted: readiness polls every 0.1 s
            replicas = [] if master is None else [pairs(r) for r in command(client, "SENTINEL", "REPLICAS",
                                                                          MASTER_NAME) or []]
        except redis.RedisError as exc:
            return f"{proc.name} does not answer: {exc}"
    if int(info.get("num-other-sentinels", 0)) < n_sentinels - 1:
        return f"{proc.name} knows {info.get('num-other-sentinels')} other sentinels"
    if int(info.get("num-slaves", 0)) < n_replicas:
        return f"{proc.name} knows {info.get('num-slaves')} replicas"
    if master is not None:
        problems = {r.get("name", "?"): replica_view_problem(r, master) for r in replicas}
        current = sum(1 for problem in problems.values() if not problem)
        if current < n_replicas:
            stale = "; ".join(f"{name}: {problem}" for name, problem in problems.items())
            return f"{proc.name} sees {current} of {n_replicas} replicas as current ({stale})"
    return ""


def replica_view_problem(replica: dict[str, str], master: Address) -> str:
    """What is off in one sentinel's view of one replica ('' when it is a linked replica of ``master``)."""
    flags = set(replica.get("flags", "").split(","))
    if bad := flags & {"s_down", "o_down", "disconnected"}:
        return f"flags {','.join(sorted(bad))}"
    if replica.get("role-reported") != "slave":
        return f"last INFO says role {replica.get('role-reported')}"
    if replica.get("master-link-status") != "ok":
        return f"last INFO says its link is {replica.get('master-link-status')}"
    if (replica.get("master-host"), replica.get("master-port")) != (master[0], str(master[1])):
        return f"last INFO says it replicates {replica.get('master-host')}:{replica.get('master-port')}"
    return ""


def ask_failover(sentinels: Sequence[RedisProcess], deadline: float) -> None:
    """``SENTINEL FAILOVER`` on the first sentinel that accepts it; returns once that sentinel
    names a new master. An aborted failover is asked for again, until ``deadline``.

    A forced failover aborts (``-failover-abort-no-good-slave``) when the sentinel's last
    ``INFO`` of the replica, refreshed only every 10 s, still shows the replica's link to the
    master down: shortly after the replica was stopped, cut off or resynced. Sentinel does not
    try again by itself, so without asking again the master would simply stay where it was.
    """
    last = ""

    def switched_once() -> bool:
        nonlocal last
        for proc in sentinels:
            before = _master_info(proc)
            if before is None:
                last = f"{proc.name} does not answer"
                continue
            with contextlib.closing(proc.client()) as client:
                try:
                    command(client, "SENTINEL", "FAILOVER", MASTER_NAME)
                except redis.RedisError as exc:
                    last = f"{proc.name}: {exc}"
                    continue
            if _failover_switched(proc, (before.get("ip"), before.get("port")), deadline):
                return True
            last = f"{proc.name}: the failover was aborted (no replica it judged good); asked again"
            return False
        return False

    if not poll(switched_once, seconds_left(deadline), 0.2):
        raise LauncherError(f"no sentinel completed SENTINEL FAILOVER in time: {last}")


def _master_info(proc: RedisProcess) -> dict[str, str] | None:
    """``SENTINEL MASTER`` on ``proc`` (None when it does not answer)."""
    with contextlib.closing(proc.client()) as client:
        try:
            return pairs(command(client, "SENTINEL", "MASTER", MASTER_NAME))
        except redis.RedisError:
            return None


def _failover_switched(proc: RedisProcess, old: tuple[str | None, str | None], deadline: float) -> bool:
    """Wait for the failover ``proc`` runs to end: True if it switched to a new master, False if aborted."""

    def ended(info: dict[str, str] | None) -> bool:
        return info is not None and "failover_in_progress" not in info.get("flags", "")

    info = poll_value(lambda: _master_info(proc), ended, seconds_left(deadline), POLL_S)
    if info is None or not ended(info):
        return False
    return (info.get("ip"), info.get("port")) != old


FRESH_PING_MS = 500  # a PING reply this recent shows the sentinel's link to the master is up


def finished_master(info: dict[str, str] | None, old: Address) -> Address | None:
    """The master a ``SENTINEL MASTER`` reply names once its failover is finished, unless it is ``old``."""
    if info is None or info.get("flags") != "master" or info.get("role-reported") != "master" \
            or not info.get("port", "").isdigit():
        return None
    addr = (info.get("ip", ""), int(info["port"]))
    return None if addr == old else addr


def fresh_ping(info: dict[str, str]) -> bool:
    """True if the sentinel had a PING reply from the master under :data:`FRESH_PING_MS` ago."""
    return int(info.get("last-ok-ping-reply", "999999")) < FRESH_PING_MS


def _view(proc: RedisProcess, info: dict[str, str] | None) -> str:
    """One sentinel's view of the master for a timeout message, with its TILT flag."""
    if info is None:
        return f"{proc.name}: no answer"
    with contextlib.closing(proc.client()) as client:
        try:
            tilt = str(client.info("sentinel").get("sentinel_tilt", "?"))
        except redis.RedisError:
            tilt = "?"
    return (
        f"{proc.name}: {info.get('ip')}:{info.get('port')} flags={info.get('flags')} "
        f"role-reported={info.get('role-reported')} last-ok-ping-reply={info.get('last-ok-ping-reply')} ms "
        f"tilt={tilt}"
    )


def wait_all_switched(sentinels: Sequence[RedisProcess], old: Address, deadline: float) -> Address:
    """Poll until every sentinel names one and the same master other than ``old``, has finished the
    failover, and has had a PING reply from that master; return it.

    The master is whichever the sentinels end up agreeing on, not the one a quorum named first: a
    failover can be followed by a second one (the first promoted replica marked down on a loaded
    machine, or a failover that timed out), and a wait for the first name never ends (seen in CI:
    all three sentinels on another replica for 60 s).

    Switched and finished must hold at once for all; the fresh PING reply (a sentinel whose link
    to the new master is not up yet may still mark it down and fail over once more) is remembered
    per sentinel from the poll that saw it, as long as that sentinel stays on that master.
    Demanding all three replies fresh at the same poll waited for ping phases to line up: with a
    ping about every second and a 500 ms bound, three sentinels on spread phases never are all
    fresh at once (a 60 s timeout in CI).
    """
    seen_fresh: dict[int, Address] = {}
    infos: dict[int, dict[str, str] | None] = {}

    def agreed() -> Address | None:
        for proc in sentinels:
            info = infos[proc.port] = _master_info(proc)
            addr = finished_master(info, old)
            if info is not None and addr is not None and fresh_ping(info):
                seen_fresh[proc.port] = addr
            elif seen_fresh.get(proc.port) != addr:  # gone elsewhere (or nowhere) since its fresh reply
                seen_fresh.pop(proc.port, None)
        masters = set(seen_fresh.values())
        return masters.pop() if len(seen_fresh) == len(sentinels) and len(masters) == 1 else None

    def what() -> str:
        views = "; ".join(_view(proc, infos.get(proc.port)) for proc in sentinels)
        return (
            f"the sentinels all to agree on a master other than {old[0]}:{old[1]} and ping it (a reply under "
            f"{FRESH_PING_MS} ms seen from {len(seen_fresh)} of {len(sentinels)}); they report: {views}"
        )

    return wait_until(agreed, seconds_left(deadline), what, POLL_S, error=LauncherError)


def pairs(reply: object) -> dict[str, str]:
    """A flat ``[k1, v1, k2, v2 ...]`` or dict reply as a dict of strings."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = list(reply) if isinstance(reply, list | tuple) else []
    return {str(k): str(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def role(proc: RedisProcess) -> str:
    """``master``, ``slave``, ``?`` or ``down`` (from ``INFO replication``)."""
    with contextlib.closing(proc.client()) as client:
        try:
            return str(client.info("replication").get("role", "?"))
        except redis.RedisError:
            return "down"
