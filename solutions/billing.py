"""``billing-worker``: the reference billing worker of course module 3 (also ``python -m solutions.billing``).

Every flag can also come from the environment as ``BILLING_<FLAG>`` (``BILLING_DEDUPE=redis``);
a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from solutions.cli import HelpFormatter, Parser, add_connection_flags, cluster_stream_problem, endpoint_from_args
from solutions.cluster_site import ClusterSite
from solutions.gc_tuning import tune_for_throughput
from solutions.ledger import BUSY_TIMEOUT_MS
from solutions.settings import DEDUPE_STRATEGIES, InputError, Settings, default_consumer, env_default
from solutions.shards import ShardCountError
from solutions.worker import Worker

log = logging.getLogger("solutions.billing")

DEFAULT_LEDGER = Path(".run/ledger.sqlite3")


def ledger_path(text: str) -> Path:
    """argparse type: a ledger file in a directory that exists (the default's ``.run/`` is created)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file path such as {path / 'ledger.sqlite3'}")
    if path != DEFAULT_LEDGER and not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"directory {path.parent} does not exist (create it, or pick another path)")
    return path


def _flag(parser: argparse._ActionsContainer, name: str, default: str | int | float | None, help_text: str, *,
          kind: Callable[[str], str | int | float | Path] | None = None, choices: Sequence[str] | None = None) -> None:
    """``--name`` with ``BILLING_<NAME>`` as its default; argparse converts (and checks) a string default too
    (with ``kind``, else the default's own type)."""
    kind = kind or (type(default) if default is not None else str)
    env = env_default(name, "")
    parser.add_argument(f"--{name}", default=env or default, help=help_text, type=kind, choices=choices)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="billing-worker",
        description="Consume order events from a Redis stream and charge them into a SQLite ledger, "
        "at least once from Redis and (with --dedupe sqlite) exactly once in effect. Every flag can also "
        "come from the environment as BILLING_<FLAG> (BILLING_DEDUPE=redis).",
        formatter_class=HelpFormatter,
    )
    add_connection_flags(p.add_argument_group("connection"), on_cluster="read every shard <stream>:{tag} of the "
                         "stream, one reader and one rescuer per shard")
    _reading_flags(p)
    _delivery_flags(p)
    _work_flags(p)
    return p


def _reading_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("names")
    _flag(g, "stream", "orders", "stream to read")
    _flag(g, "group", "billing", "consumer group (created with MKSTREAM if missing)")
    _flag(g, "consumer", default_consumer(), "consumer name, unique per process (default: <hostname>-<pid>)")
    g = p.add_argument_group("reading and concurrency")
    _flag(g, "count", 16, "XREADGROUP COUNT: entries per read (a batch size; it bounds one read, not the work in hand)")
    _flag(g, "block-ms", 2000, "XREADGROUP BLOCK in ms (the socket timeout is set above it)")
    _flag(g, "parallelism", 8, "handlers running at once")
    _flag(
        g,
        "order-key",
        "order_id",
        "messages with the same value of this field run one at a time, in stream order; '' turns ordering off",
    )


def _delivery_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rescuer, retries and dead letters")
    _flag(
        g,
        "min-idle-ms",
        120_000,
        "reclaim pending messages idle at least this long (about 2x the p99 of the handler)",
    )
    _flag(g, "claim-interval-ms", 30_000, "how often the group's one rescuer runs XAUTOCLAIM")
    _flag(g, "max-attempts", 5, "deliveries (as counted by Redis) before a message goes to <stream>:dlq")
    g = p.add_argument_group("idempotency and ledger")
    _flag(
        g,
        "dedupe",
        "sqlite",
        "none: no protection; redis: SET NX EX marker (the course's; loses work "
        "if the process dies between mark and work); redis-2phase: lease, then done marker with the "
        "XACK; sqlite: charge and applied_events row in one transaction (exactly once)",
        choices=DEDUPE_STRATEGIES,
    )
    _flag(g, "ledger", str(DEFAULT_LEDGER), "SQLite file of charges (WAL); its directory must exist", kind=ledger_path)
    _flag(
        g,
        "ledger-busy-timeout-ms",
        BUSY_TIMEOUT_MS,
        "how long a charge waits for another process's lock on the ledger; longer, and the store "
        "counts as down (reading pauses, the store is probed until it answers)",
    )
    _flag(g, "dedupe-ttl-s", 7 * 24 * 3600, "TTL of Redis dedupe markers; keep it >= the stream's retention")


def _work_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulated work (the lab's handler)")
    _flag(g, "handler-delay-ms", 50, "fixed work per message")
    _flag(g, "handler-jitter-ms", 0, "plus a uniform random extra up to this, so p99 differs from the median")
    _flag(g, "fail-every", 0, "every Nth processing attempt fails transiently (0: never)")
    g = p.add_argument_group("shutdown and observability")
    _flag(g, "drain-timeout-s", 30.0, "on SIGINT/SIGTERM, how long in-flight handlers may finish")
    _flag(g, "metrics-interval-s", 10.0, "log the counters and gauges this often")
    _flag(g, "metrics-port", None, "serve Prometheus /metrics on this port (default: off)", kind=int)
    _flag(g, "metrics-host", "127.0.0.1", "address the /metrics endpoint binds to (0.0.0.0: every interface)")
    _flag(g, "log-level", "INFO", "DEBUG, INFO, WARNING ...")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` for parsed ``billing-worker`` flags."""
    return Settings(
        **endpoint_from_args(args).fields(),
        stream=args.stream,
        group=args.group,
        consumer=args.consumer,
        count=args.count,
        block_ms=args.block_ms,
        parallelism=args.parallelism,
        order_key=args.order_key,
        min_idle_ms=args.min_idle_ms,
        claim_interval_ms=args.claim_interval_ms,
        max_attempts=args.max_attempts,
        dedupe=args.dedupe,
        ledger=args.ledger,
        ledger_busy_timeout_ms=args.ledger_busy_timeout_ms,
        handler_delay_ms=args.handler_delay_ms,
        handler_jitter_ms=args.handler_jitter_ms,
        fail_every=args.fail_every,
        drain_timeout_s=args.drain_timeout_s,
        metrics_interval_s=args.metrics_interval_s,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        dedupe_ttl_s=args.dedupe_ttl_s,
    )


def configure_logging(level: str, consumer: str) -> None:
    """Logs to stderr: time, level, consumer, logger, message."""
    tag = consumer.replace("%", "%%")
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s [{tag}] %(name)s: %(message)s",
    )


def _ignore_late_signals() -> None:
    """The drain is over and the process returns 0 next: a late SIGINT/SIGTERM must not turn that into -15."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Run the worker; bad flags exit 2 and a worker that cannot start exits 1, each with one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if settings.cluster and (problem := cluster_stream_problem(settings.stream)):
        parser.error(problem)
    configure_logging(args.log_level, settings.consumer)
    tune_for_throughput()
    try:
        worker = Worker(settings, site=ClusterSite(settings)) if settings.cluster else Worker(settings)
        asyncio.run(worker.run(handle_signals=True))
        _ignore_late_signals()
    except InputError as exc:  # --cluster, or the shard registry it points at, is wrong
        log.error("cannot run: %s", exc)
        return 2
    except ShardCountError as exc:
        log.error("cannot run: %s", exc)
        return 1
    except KeyboardInterrupt:  # a signal before the handlers were installed: nothing was in flight
        log.info("drain complete: interrupted before the worker started")
    except sqlite3.Error as exc:
        log.error("cannot use the ledger %s: %s: %s", settings.ledger, type(exc).__name__, exc)
        return 1
    except OSError as exc:  # the metrics port is taken, the ledger's directory is not writable ...
        log.error("cannot run: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
