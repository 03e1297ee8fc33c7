"""The raw consumer as a process of its own: ``python -m labs.bench.raw_consumer URL STREAM GROUP N``.

The fastest plain ``redis.asyncio`` loop: XREADGROUP ``COUNT`` (100), nothing per message,
one XACK with every id of the batch; it exits once it has acked ``N`` messages. The bench
counts its acks from the server (:mod:`labs.bench.process_runs`), exactly as it counts the
``billing-worker`` process's, so the two figures are measured the same way.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

COUNT = 100
BLOCK_MS = 1000


async def consume(url: str, stream: str, group: str, n: int, count: int = COUNT) -> int:
    """Read and ack until ``n`` are acked (or the stream stays dry for a BLOCK); returns how many."""
    client = aioredis.Redis.from_url(url)
    done = 0
    try:
        while done < n:
            reply: Any = await client.xreadgroup(group, "raw", {stream: ">"}, count=count, block=BLOCK_MS)
            if not reply:
                break
            ids = [msg_id for msg_id, _fields in reply[0][1]]
            await client.xack(stream, group, *ids)
            done += len(ids)
    finally:
        await client.aclose()
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.bench.raw_consumer", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("stream")
    parser.add_argument("group")
    parser.add_argument("n", type=int)
    parser.add_argument("--count", type=int, default=COUNT)
    args = parser.parse_args(argv)
    done = asyncio.run(consume(args.url, args.stream, args.group, args.n, args.count))
    return 0 if done >= args.n else 1


if __name__ == "__main__":
    raise SystemExit(main())
