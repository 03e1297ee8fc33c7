"""Memory fragmentation made for real on a throwaway ``redis-server``, and what the tools say about it.

Fragmentation is memory the allocator holds in pages that are only partly used: after many small
values are freed here and there, jemalloc keeps every page that still holds one live value. Two
ratios in ``INFO memory`` tell it apart from its look-alikes:

- ``mem_fragmentation_ratio`` = RSS / ``used_memory``: everything the process holds over what the
  data takes. On a small node it is 5-15 with a few MiB behind it (the process's own pages), and
  after a peak (data deleted, RSS kept for reuse) it is large while nothing is fragmented;
- ``allocator_frag_ratio`` = ``allocator_active`` / ``allocator_allocated``: pages in use by the
  allocator over the bytes really allocated in them. This one is the fragmentation.

:func:`fragment` fills the node with ``keys`` values of ``value_bytes`` (a Lua loop per chunk, so the
fill costs seconds, not a round trip per key) and deletes two of every three: each page keeps a
third of its values. :func:`purge` runs ``MEMORY PURGE``, :func:`try_activedefrag` switches
``activedefrag`` on (Debian's and most distributions' builds refuse: it needs the jemalloc shipped
with the Redis sources), :func:`doctor` reads ``MEMORY DOCTOR``, and :func:`rule_fires` evaluates
the production ``RedisFragmented`` rule on a snapshot with promtool.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

from labs.launcher.process import command
from labs.launcher.promtool import promtool
from labs.launcher.rule_scale import MONITORING_DIR
from labs.polling import poll

log = logging.getLogger(__name__)

CHUNK = 20_000  # keys per EVAL: a fraction of a second each, even on a busy machine
ALERT = "RedisFragmented"
RULES = MONITORING_DIR / "rules" / "redis.yml"
DEFRAG_WAIT_S = 10.0
SAMPLE_WAIT_S = 1.0  # serverCron samples RSS and the allocator every 100 ms

_FILL = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', KEYS[1] .. i, string.rep('x', tonumber(ARGV[3])))
end
return 1
"""
_DROP = """
local n = 0
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  if tonumber(ARGV[3]) == 0 or i % tonumber(ARGV[3]) ~= 0 then n = n + redis.call('DEL', KEYS[1] .. i) end
end
return n
"""

# INFO memory field -> the exporter's metric (prometheus-redis-exporter 1.45)
METRICS = {
    "mem_fragmentation_ratio": "redis_mem_fragmentation_ratio",
    "mem_fragmentation_bytes": "redis_mem_fragmentation_bytes",
    "allocator_frag_ratio": "redis_allocator_frag_ratio",
    "allocator_frag_bytes": "redis_allocator_frag_bytes",
}


@dataclass(frozen=True)
class MemoryView:
    """The ``INFO memory`` fields that tell fragmentation from its look-alikes."""

    used_bytes: int
    rss_bytes: int
    mem_fragmentation_ratio: float
    mem_fragmentation_bytes: int
    allocator_allocated_bytes: int
    allocator_active_bytes: int
    allocator_frag_ratio: float
    allocator_frag_bytes: int

    @classmethod
    def read(cls, client: redis.Redis) -> MemoryView:
        """``INFO memory`` as it reads now: RSS and the allocator's figures may be up to one sample old."""
        info: dict[str, Any] = client.info("memory")
        return cls(
            int(info["used_memory"]), int(info["used_memory_rss"]),
            float(info["mem_fragmentation_ratio"]), int(info["mem_fragmentation_bytes"]),
            int(info["allocator_allocated"]), int(info["allocator_active"]),
            float(info["allocator_frag_ratio"]), int(info["allocator_frag_bytes"]),
        )

    @classmethod
    def settled(cls, client: redis.Redis, *, timeout_s: float = SAMPLE_WAIT_S) -> MemoryView:
        """``INFO memory`` once a sample taken after the last change is in it (polled, at most ``timeout_s``).

        RSS and every ``allocator_*`` field are not measured when ``INFO`` runs: ``serverCron`` samples them
        every 100 ms and ``INFO`` prints the last sample, while ``used_memory`` is live. Read right after a
        delete of 40 MB that took 0.1 s, the view showed the filled node's allocator (CI, Redis 7.0.15). A
        fresh sample's used memory (RSS minus ``mem_fragmentation_bytes``) equals the live one; on a server
        that computes those fields otherwise the wait runs out and the last view is returned.
        """
        return cls._polled(client, lambda view: view.is_fresh, timeout_s)

    @classmethod
    def next_sample(cls, client: redis.Redis, before: MemoryView, *,
                    timeout_s: float = SAMPLE_WAIT_S) -> MemoryView:
        """``INFO memory`` once its sampled figures differ from ``before``'s (a newer sample), or at the deadline."""
        return cls._polled(client, lambda view: view.sample != before.sample, timeout_s)

    @classmethod
    def _polled(cls, client: redis.Redis, done: Callable[[MemoryView], bool], timeout_s: float) -> MemoryView:
        latest = [cls.read(client)]

        def newer() -> bool:
            latest[0] = cls.read(client)
            return done(latest[0])

        if not done(latest[0]):
            poll(newer, timeout_s, poll_s=0.02)
        return latest[0]

    @property
    def sampled_used_bytes(self) -> int:
        """``used_memory`` as the last sample saw it (RSS minus ``mem_fragmentation_bytes``)."""
        return self.rss_bytes - self.mem_fragmentation_bytes

    @property
    def is_fresh(self) -> bool:
        """The sampled figures were taken after the last big change (the sample's used memory is today's)."""
        return abs(self.sampled_used_bytes - self.used_bytes) <= max(1 << 20, self.used_bytes // 50)

    @property
    def sample(self) -> tuple[int, int, int]:
        """The figures ``serverCron`` samples (``INFO`` prints its last sample)."""
        return self.rss_bytes, self.allocator_allocated_bytes, self.allocator_active_bytes

    def row(self) -> list[str]:
        mib = 2**20
        return [f"{self.used_bytes / mib:.1f}", f"{self.rss_bytes / mib:.1f}", f"{self.mem_fragmentation_ratio:.2f}",
                f"{self.allocator_frag_ratio:.2f}", f"{self.allocator_frag_bytes / mib:.1f}"]


COLUMNS = ["used_memory, MiB", "RSS, MiB", "mem_fragmentation_ratio", "allocator_frag_ratio",
           "allocator_frag_bytes, MiB"]


@dataclass(frozen=True)
class Fragmented:
    """The node filled, then with two values of three deleted; seconds each step took."""

    filled: MemoryView
    fragmented: MemoryView
    keys_left: int
    fill_s: float
    drop_s: float


def fragment(client: redis.Redis, *, keys: int, value_bytes: int, keep_every: int = 3,
             prefix: str = "frag:") -> Fragmented:
    """Write ``keys`` strings of ``value_bytes``, then delete all but every ``keep_every``-th."""
    started = time.monotonic()
    for first in range(1, keys + 1, CHUNK):
        client.eval(_FILL, 1, prefix, first, min(keys, first + CHUNK - 1), value_bytes)
    filled = MemoryView.settled(client)
    dropped_at = time.monotonic()
    for first in range(1, keys + 1, CHUNK):
        client.eval(_DROP, 1, prefix, first, min(keys, first + CHUNK - 1), keep_every)
    fragmented = MemoryView.settled(client)
    done = time.monotonic()
    log.info("fragmented %d keys of %d B in %.1f s", keys, value_bytes, done - started)
    return Fragmented(filled, fragmented, int(client.dbsize()), dropped_at - started, done - dropped_at)


def delete_all(client: redis.Redis, *, keys: int, prefix: str = "frag:") -> MemoryView:
    """Delete every value :func:`fragment` wrote (a peak left behind), then the view."""
    for first in range(1, keys + 1, CHUNK):
        client.eval(_DROP, 1, prefix, first, min(keys, first + CHUNK - 1), 0)
    return MemoryView.settled(client)


def purge(client: redis.Redis) -> MemoryView:
    """``MEMORY PURGE`` (jemalloc: give back the pages no live value uses), then the view."""
    before = MemoryView.settled(client)
    command(client, "MEMORY", "PURGE")
    return MemoryView.next_sample(client, before)


@dataclass(frozen=True)
class Defrag:
    """``CONFIG SET activedefrag yes``: refused (this build's jemalloc cannot move values), or run."""

    refusal: str | None
    after: MemoryView | None


def try_activedefrag(client: redis.Redis, *, wait_s: float = DEFRAG_WAIT_S) -> Defrag:
    """Switch active defragmentation on; where the build allows it, wait for a pass and switch it off."""
    try:
        client.config_set("activedefrag", "yes")
    except redis.ResponseError as exc:
        return Defrag(str(exc), None)
    try:
        time.sleep(0.5)  # the defragmenter's first cycle starts on the server's next cron tick
        poll(lambda: int(client.info("memory").get("active_defrag_running", 0)) == 0
             and int(client.info("stats").get("active_defrag_hits", 0)) > 0, wait_s, 0.5)
        return Defrag(None, MemoryView.read(client))
    finally:
        client.config_set("activedefrag", "no")


def doctor(client: redis.Redis) -> str:
    """``MEMORY DOCTOR``'s report (text)."""
    reply = command(client, "MEMORY", "DOCTOR")
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def _promtool_case(view: MemoryView, rules: Path) -> dict[str, Any]:
    labels = 'instance="lab",job="redis",node="lab",topology="lab"'
    values = {metric: getattr(view, field) for field, metric in METRICS.items()}
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": f"{metric}{{{labels}}}", "values": f"{value}x60"}
                             for metric, value in values.items()],
            "alert_rule_test": [{"eval_time": "45m", "alertname": ALERT, "exp_alerts": []}],
        }],
    }


def rule_fires(view: MemoryView, *, rules: Path = RULES) -> bool:
    """Would the production ``RedisFragmented`` fire on a node that reads ``view`` for 45 minutes?

    promtool runs a one-case test that expects silence: passing means quiet, failing on this
    alert means it fired; anything else (a broken rule file) raises.
    """
    with tempfile.TemporaryDirectory(prefix="frag-promtool-") as tmp:
        case = Path(tmp) / "case.yml"
        case.write_text(yaml.safe_dump(_promtool_case(view, rules)))
        run = promtool("test", "rules", str(case))
    if run.ok:
        return False
    if f'alertname="{ALERT}"' in run.output:
        return True
    raise RuntimeError(f"promtool could not evaluate {ALERT}: {run.output}")
