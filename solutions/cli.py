"""Command-line plumbing shared by ``billing-worker`` and ``billing-producer``.

- :class:`Parser`: a bad flag is one line, ``prog: error: <reason> (see prog --help)``, exit 2
  (argparse's default prints the whole usage first, a dozen lines for the worker).
- :class:`HelpFormatter`: ``(default: X)`` after a flag's help, once, and only when there is a
  default worth printing (never ``(default: None)``, never twice).
- argparse types that turn bad input into that one line: :func:`redis_url`, :func:`address`;
  :func:`env_addresses` reads a list of them from the environment (``BILLING_CLUSTER``);
  :func:`cluster_stream_problem` is the rule both CLIs apply to a stream name under ``--cluster``.
"""

from __future__ import annotations

import argparse
from typing import NoReturn
from urllib.parse import urlsplit

from solutions.settings import Address, env_default, parse_address

URL_SCHEMES = ("redis", "rediss", "unix")


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` unless the help already speaks of its default or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or not action.option_strings or default is None or default is False:
            return text
        if default == argparse.SUPPRESS:
            return text
        if default == "":
            return text + " (default: '')"
        return text + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line and exit 2 (give it ``formatter_class=HelpFormatter``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def redis_url(text: str) -> str:
    """argparse type: a URL that redis-py accepts (``redis://``, ``rediss://``, ``unix://``)."""
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Redis URL ({exc})") from None
    if parts.scheme not in URL_SCHEMES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Redis URL (expected redis://HOST:PORT/DB, "
                                         "rediss://... or unix:///path)")
    return text


def address(text: str) -> Address:
    """argparse type: ``HOST:PORT``."""
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def env_addresses(name: str) -> list[Address]:
    """``BILLING_<NAME>=HOST:PORT,HOST:PORT`` as addresses (none when unset); ValueError on a bad one."""
    return [parse_address(part.strip()) for part in env_default(name, "").split(",") if part.strip()]


def cluster_stream_problem(stream: str) -> str | None:
    """Why ``stream`` cannot be sharded on a cluster, or None.

    A shard is ``<stream>:{<tag>}`` and only the first ``{...}`` of a key is its hash tag: braces
    in the stream's own name would be that tag, every shard would hash to the same slot, and no
    shard set could spread over the masters (nor be planned at all: each shard needs a slot).
    """
    if "{" in stream or "}" in stream:
        return (f"--stream {stream!r}: a stream sharded on a cluster must not contain '{{' or '}}' "
                "(the first braces would be every shard's hash tag, putting them all in one slot)")
    return None
