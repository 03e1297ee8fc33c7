"""``make check-lab-1 IMPL=...``: lab 1's checks against a student's implementation.

``python -m labs.lab1.check --impl my_lab1.py`` (or a dotted module name) loads the module,
probes ``produce_one`` and ``consume_once`` on their own, then runs the lab's scenario with
scaled-down timings (the ``smoke`` preset: seconds instead of minutes) and prints PASS or
FAIL per check with the reason. Exit code 0 when every check passes, 1 otherwise.

It uses ``--redis-url`` when given, else the lab's ``aof`` topology (started if needed).
Its keys live under a prefix of their own (``lab1check:<random>:``) and are deleted
afterwards; nothing is flushed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import uuid
from collections.abc import Sequence

from rich.markup import escape

from labs.lab1.checks import evaluate
from labs.lab1.client import client as naming_client
from labs.lab1.impl import REFERENCE, ImplError, load_impl, probe_block, probe_group, probe_producer
from labs.lab1.scenario import run_scenario
from labs.lab1.settings import PRESETS
from labs.launcher import topologies
from labs.launcher.errors import LauncherError
from labs.report import Check, left_running, make_console, print_checks

log = logging.getLogger(__name__)


def run_checks(impl_spec: str, redis_url: str, *, preset: str = "smoke") -> list[Check]:
    """Every check of lab 1 against ``impl_spec`` on ``redis_url``, in order."""
    try:
        impl = load_impl(impl_spec)
    except (ImplError, SyntaxError) as exc:
        return [Check("load the implementation", False, str(exc))]
    prefix = f"lab1check:{uuid.uuid4().hex[:8]}:"
    settings = PRESETS[preset]
    with contextlib.closing(naming_client(redis_url, socket_timeout_s=settings.socket_timeout_s)) as client:
        try:
            checks = [Check("load the implementation", True, impl_spec)]
            checks.append(probe_group(impl, client, f"{prefix}probe-group", "billing"))
            checks.append(probe_producer(impl, client, f"{prefix}probe-produce"))
            checks.append(probe_block(impl, client, f"{prefix}probe-block", "billing"))
            result = run_scenario(impl, redis_url, settings, stream=f"{prefix}orders")
            checks += evaluate(result)
        finally:
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
    return checks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labs.lab1.check", description="Lab 1 checks against an implementation."
    )
    parser.add_argument("--impl", default=REFERENCE, help=f"module name or .py file (default {REFERENCE})")
    parser.add_argument(
        "--redis-url", help="Redis to use (default: the lab's aof topology, started if needed)"
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke", help="timings (default smoke)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    console = make_console()
    try:
        url = args.redis_url or topologies.from_env("aof").ensure().url
    except LauncherError as exc:
        console.print(f"error: {escape(str(exc))}")
        return 2
    console.print(f"lab 1 checks of [bold]{escape(args.impl)}[/] on {url} ({args.preset} timings) ...")
    checks = run_checks(args.impl, url, preset=args.preset)
    code = print_checks(console, checks)
    if not args.redis_url:
        left_running(console, "aof", url)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
