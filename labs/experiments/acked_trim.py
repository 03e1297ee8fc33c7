"""Redis 8.2's ``XACKDEL`` / ``XDELEX`` and trimming with ``ACKED``: what the course's two warnings become.

On Redis 7.0 (and Valkey 8) two facts hold that the course teaches: ``XACK`` does not delete (an
acked entry stays in the stream until trimmed), and ``MAXLEN`` trims by count alone, so a slow
group loses what it has not read yet. Redis 8.2 adds a reference policy to deletion and trimming:

* ``KEEPREF`` (the default, the old behaviour): delete regardless of the groups, leave their PELs;
* ``DELREF``: delete and drop the entry from every group's PEL;
* ``ACKED``: delete only what no group still needs (none has it pending, none can still deliver it).

``XACKDEL key group [policy] IDS n id ...`` is ``XACK`` plus that deletion in one command;
``XDELEX key [policy] IDS n id ...`` is ``XDEL`` with a policy; ``XADD`` / ``XTRIM`` take the policy
after the trim. Reply codes per ID: ``1`` deleted, ``2`` kept because a group still needs it
(``ACKED``), ``-1`` no such ID. Approximate trimming (``MAXLEN ~``) with ``ACKED`` or ``DELREF``
deletes nothing before Redis 8.2.7 (redis/redis#14656, fixed by #14623): when a whole node could
go but its entries' references had to be checked, the loop stopped instead of checking them.
So what runs here (8.2.3) trims exactly (``MAXLEN =``). Tests in ``tests/test_acked_trim.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from redis.typing import EncodableT

from labs.launcher.flavours import server_version
from labs.launcher.process import command

FIXED_APPROX_ACKED = (8, 2, 7)  # the first release whose MAXLEN ~ ... ACKED trims at all


def _command(client: redis.Redis, *args: EncodableT) -> Any:  # the reply, as Redis sent it
    """One raw command: redis-py 8.1 has no typed methods for the 8.2 options."""
    return command(client, *args)


def supports_acked(client: redis.Redis) -> bool:
    """True when the server knows ``XACKDEL`` (Redis >= 8.2; Valkey only from 9.2).

    Asked by calling it without arguments: an arity error means the command exists, "unknown
    command" that it does not (redis-py cannot parse ``COMMAND INFO``'s nil for an unknown name).
    """
    try:
        _command(client, "XACKDEL")
    except redis.ResponseError as err:
        return "unknown command" not in str(err).lower()
    return True


def version_of(client: redis.Redis) -> tuple[int, int, int]:
    """The server's own version (``INFO server``)."""
    return server_version(client.info("server"))


def _ids(reply: Any) -> list[str]:
    return [str(msg_id) for _, entries in reply for msg_id, _ in entries] if reply else []


@dataclass(frozen=True)
class AckDelResult:
    acked_kept: int  # XACKDEL fast ACKED on an entry slow has not read: 2, kept
    xack_len: int  # after a plain XACK by both groups: the entry is still there
    keepref_deleted: int  # XACKDEL fast (KEEPREF) on an entry slow has not read: 1, deleted
    slow_got: list[str]  # what slow then reads: the KEEPREF-deleted entry is missing
    acked_deleted: int  # XACKDEL slow ACKED once both are done: 1, deleted
    xdelex_codes: list[int]  # XDELEX ACKED on [an entry slow has pending, an unknown ID]: [2, -1]
    final_len: int
    ids: list[str]


def ack_and_delete(client: redis.Redis, stream: str) -> AckDelResult:
    """Groups ``fast`` and ``slow`` on four entries; ``fast`` acks with each policy, ``slow`` reads after."""
    client.delete(stream)
    ids = [str(client.xadd(stream, {"n": str(n)})) for n in range(4)]
    for group in ("fast", "slow"):
        client.xgroup_create(stream, group, id="0")
    client.xreadgroup("fast", "f-1", {stream: ">"}, count=4)
    (acked_kept,) = _command(client, "XACKDEL", stream, "fast", "ACKED", "IDS", 1, ids[0])
    client.xack(stream, "fast", ids[1])
    (keepref_deleted,) = _command(client, "XACKDEL", stream, "fast", "KEEPREF", "IDS", 1, ids[2])
    client.xack(stream, "fast", ids[3])
    slow_got = _ids(client.xreadgroup("slow", "s-1", {stream: ">"}, count=10))
    client.xack(stream, "slow", ids[3])
    xack_len = int(client.xlen(stream))  # ids[3]: acked by both with XACK, still in the stream
    (acked_deleted,) = _command(client, "XACKDEL", stream, "slow", "ACKED", "IDS", 1, ids[0])
    xdelex = _command(client, "XDELEX", stream, "ACKED", "IDS", 2, ids[1], "0-1")
    return AckDelResult(
        acked_kept=int(acked_kept),
        xack_len=xack_len,
        keepref_deleted=int(keepref_deleted),
        slow_got=slow_got,
        acked_deleted=int(acked_deleted),
        xdelex_codes=[int(c) for c in xdelex],
        final_len=int(client.xlen(stream)),
        ids=ids,
    )


@dataclass(frozen=True)
class TrimRun:
    how: str  # the XTRIM arguments
    deleted: int
    length: int
    slow_can_still_read: int  # entries slow had not read that are still in the stream


def _behind(client: redis.Redis, stream: str, entries: int, slow_read: int) -> list[str]:
    """``entries`` entries; ``fast`` read and acked all, ``slow`` read and acked the first ``slow_read``."""
    client.delete(stream)
    pipe = client.pipeline(transaction=False)
    for n in range(entries):
        pipe.xadd(stream, {"n": str(n)})
    ids = [str(i) for i in pipe.execute()]
    for group, count in (("fast", entries), ("slow", slow_read)):
        client.xgroup_create(stream, group, id="0")
        got = _ids(client.xreadgroup(group, f"{group}-1", {stream: ">"}, count=count))
        client.xack(stream, group, *got)
    return ids


def trim_with_slow_group(
    client: redis.Redis, stream: str, *, entries: int = 300, slow_read: int = 100, maxlen: int = 10
) -> list[TrimRun]:
    """The same backlog trimmed three ways: ``MAXLEN =`` (7.0's), ``MAXLEN = ... ACKED``, ``MAXLEN ~ ... ACKED``."""
    runs = []
    hows: list[list[EncodableT]] = [["=", maxlen], ["=", maxlen, "ACKED"], ["~", maxlen, "ACKED"]]
    for how in hows:
        ids = _behind(client, stream, entries, slow_read)
        deleted = int(_command(client, "XTRIM", stream, "MAXLEN", *how))
        left = {str(msg_id) for msg_id, _ in client.xrange(stream) or []}
        unread = sum(1 for msg_id in ids[slow_read:] if msg_id in left)
        runs.append(TrimRun(" ".join(map(str, ["MAXLEN", *how])), deleted, int(client.xlen(stream)), unread))
    client.delete(stream)
    return runs
