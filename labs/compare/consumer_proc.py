"""A consumer in a process of its own, for the crash scenario: it kills itself with SIGKILL after its
Nth charge, before that delivery's ack (``python -m labs.compare.consumer_proc``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path

from labs.compare.consumer import Charger, consume
from labs.compare.contract import Settings
from labs.compare.registry import make_broker


async def _main(args: argparse.Namespace) -> None:
    settings = Settings(**json.loads(args.settings))
    broker = make_broker(args.kind, json.loads(args.address), args.queue, settings)
    await broker.connect()
    charger = Charger(Path(args.ledger), args.consumer, max_attempts=settings.max_attempts,
                      crash_after_charges=args.crash_after_charges, broker_dead_letters=broker.broker_dead_letters)
    await consume(broker, charger, asyncio.Event())


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")  # its planned kill: quiet
    parser = argparse.ArgumentParser(prog="python -m labs.compare.consumer_proc")
    for name in ("--kind", "--address", "--queue", "--ledger", "--consumer", "--settings"):
        parser.add_argument(name, required=True)
    parser.add_argument("--crash-after-charges", type=int, default=0)
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
