"""Command-line plumbing shared by ``billing-worker`` and ``billing-producer``.

- :class:`Parser`: a bad flag is one line, ``prog: error: <reason> (see prog --help)``, exit 2
  (argparse's default prints the whole usage first, a dozen lines for the worker).
- :class:`HelpFormatter`: ``(default: X)`` after a flag's help, once, and only when there is a
  default worth printing (never ``(default: None)``, never twice).
- argparse types that turn bad input into that one line: :func:`redis_url`, :func:`address`;
  :func:`env_addresses` reads a list of them from the environment (``BILLING_CLUSTER``);
  :func:`cluster_stream_problem` is the rule both CLIs apply to a stream name under ``--cluster``.
- The connection flags both CLIs take, from one definition: :func:`add_connection_flags` adds
  ``--redis-url``, ``--sentinel``, ``--master-name``, ``--cluster`` and ``--shards`` (each with its
  ``BILLING_<FLAG>`` default) and :func:`endpoint_from_args` makes the
  :class:`~solutions.settings.Endpoint` of them.
"""

from __future__ import annotations

import argparse
from typing import NoReturn
from urllib.parse import urlsplit

from solutions.settings import DEFAULT_REDIS_URL, Address, Endpoint, env_default, parse_address

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


def add_connection_flags(group: argparse._ActionsContainer, *, on_cluster: str) -> None:
    """``--redis-url``, ``--sentinel``, ``--master-name``, ``--cluster``, ``--shards``: where the stream lives.

    ``on_cluster`` ends the help of ``--cluster``: what the CLI does with the stream's shards.
    """
    group.add_argument("--redis-url", default=env_default("redis-url", DEFAULT_REDIS_URL), type=redis_url,
                       help="plain Redis to connect to (ignored with --sentinel)")
    group.add_argument("--sentinel", action="append", type=address, metavar="HOST:PORT", default=None,
                       help="connect through this Sentinel instead (repeat for each sentinel)")
    group.add_argument("--master-name", default=env_default("master-name", "mymaster"),
                       help="the master's name in Sentinel")
    group.add_argument("--cluster", action="append", type=address, metavar="HOST:PORT", default=None,
                       help="a node of a Redis Cluster (repeat for more startup nodes; BILLING_CLUSTER=H:P,H:P): "
                       + on_cluster)
    group.add_argument("--shards", type=int, default=env_default("shards", "") or None,
                       help="with --cluster: the stream's number of shards, fixed for its life (default: as "
                       "registered in <stream>:shards by the first producer or worker)")


def endpoint_from_args(args: argparse.Namespace) -> Endpoint:
    """The :class:`~solutions.settings.Endpoint` of :func:`add_connection_flags`' flags (``BILLING_CLUSTER``
    when there is no ``--cluster``); ValueError with the reason for a bad one."""
    try:
        cluster = args.cluster or env_addresses("cluster")
    except ValueError as exc:
        raise ValueError(f"BILLING_CLUSTER: {exc}") from None
    return Endpoint(redis_url=args.redis_url, sentinels=tuple(args.sentinel or ()), master_name=args.master_name,
                    cluster=tuple(cluster), shards=args.shards)
