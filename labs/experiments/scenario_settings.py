"""The experiments' worker settings: one base, and each scenario's settings a ``dataclasses.replace`` of it.

A scenario names only the fields it changes, where it changes them: ``replace`` takes the
dataclass's own fields (mypy checks their names and types) and runs ``Settings.__post_init__``
again, so a wrong value fails where it is written, not deep inside a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from solutions.settings import Address, Settings

GROUP = "billing"


def base(stream: str, ledger: Path, *, redis_url: str | None = None, cluster: Sequence[Address] = ()) -> Settings:
    """A short run in a notebook or the bench: group ``billing``, a short BLOCK, no metrics chatter.

    ``redis_url`` for one Redis (or a Sentinel topology's URL), ``cluster`` for a cluster's startup nodes.
    """
    settings = Settings(stream=stream, group=GROUP, ledger=ledger, cluster=tuple(cluster), block_ms=200,
                        metrics_interval_s=60.0)
    return settings if redis_url is None else replace(settings, redis_url=redis_url)
