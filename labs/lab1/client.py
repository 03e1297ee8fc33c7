"""The client lab 1 hands to an implementation: a ``redis.Redis`` whose errors name their command.

A student's call that Redis refuses comes back as a bare ``ResponseError: value is not an
integer or out of range``, which does not say which of the four functions, let alone which
command, sent the bad argument. :class:`NamingRedis` adds a note to every Redis error it
raises: the command and its first arguments (``XPENDING orders billing IDLE 200.0 0-0 + 100``),
so the checker can print each distinct error once, with the command that raised it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis.typing import EncodableT

SHOWN_ARGS = 8
ARG_CHARS = 40


def command_text(args: tuple[EncodableT, ...]) -> str:
    """``XPENDING key group IDLE 200.0 ...``: the command and its first arguments, shortened."""
    parts = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in args[: SHOWN_ARGS + 1]]
    text = " ".join(p if len(p) <= ARG_CHARS else p[: ARG_CHARS - 3] + "..." for p in parts)
    return text + (" ..." if len(args) > SHOWN_ARGS + 1 else "")


class NamingRedis(redis.Redis):
    """``redis.Redis`` that notes ``from <command ...>`` on every Redis error it raises."""

    def execute_command(self, *args: EncodableT, **options: Any) -> Any:  # redis-py's options; the reply as sent
        send: Callable[..., Any] = super().execute_command  # redis-py leaves execute_command unannotated
        try:
            return send(*args, **options)
        except redis.RedisError as exc:
            exc.add_note(f"from {command_text(args)}")
            raise


def client(url: str, *, socket_timeout_s: float) -> NamingRedis:
    """A decoded client for ``url`` (its socket timeout must exceed any BLOCK the code uses)."""
    pool = redis.ConnectionPool.from_url(url, decode_responses=True, socket_timeout=socket_timeout_s,
                                         socket_connect_timeout=5.0)
    return NamingRedis(connection_pool=pool)
