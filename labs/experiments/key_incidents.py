"""Incidents from the course's roadmap: a big key, a hot key, and eviction taking a stream, as monitoring sees them.

- :func:`big_key_report`: ``redis-cli --bigkeys`` (a SCAN of the keyspace that reports the biggest
  key of each type by element count, strings by length in bytes) beside ``MEMORY USAGE`` (bytes) of
  what it found; :func:`mem_key_report`: ``redis-cli --memkeys``, the same SCAN ranked by
  ``MEMORY USAGE`` per type.
- :func:`hot_key_report`: ``redis-cli --hotkeys`` reads each key's LFU counter (``OBJECT FREQ``),
  which exists only under an ``*-lfu`` ``maxmemory-policy``: first the refusal under the default
  policy, then the hot key under ``allkeys-lfu``.
- :func:`evict_stream` runs notebook 01's eviction (:mod:`labs.experiments.eviction`) on a node that
  Prometheus scrapes: the stream with its group and PEL disappears, and the exporter's series of it
  disappear too, while ``redis_evicted_keys_total`` jumps and ``RedisEvictingKeys`` fires.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import redis

from labs.experiments import eviction
from labs.experiments.alert_faults import Fired, wait_fired
from labs.launcher import binaries
from labs.launcher.prom_api import PrometheusAPI
from labs.polling import poll_value

CLI_TIMEOUT_S = 30.0
_BIGGEST = re.compile(r"^Biggest\s+(\w+) found '?\"?(.+?)\"?'? has (\d+) (\w+)", re.MULTILINE)
_HOT = re.compile(r"^hot key found with counter: (\d+)\s+keyname: \"?(.+?)\"?$", re.MULTILINE)

T = TypeVar("T")


def redis_cli(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``redis-cli -p port args...`` (its stdout and stderr, never raising on a non-zero exit)."""
    return subprocess.run(
        [binaries.find("redis-cli"), "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False,
    )


@dataclass(frozen=True)
class Biggest:
    """One "Biggest <type> found" line of ``--bigkeys``, with the key's ``MEMORY USAGE``."""

    type: str
    key: str
    size: int
    unit: str  # fields, items, members, bytes, entries
    memory_bytes: int


def make_big_hash(client: redis.Redis, key: str, fields: int = 20_000, chunk: int = 2_000) -> None:
    """``HSET`` ``fields`` fields in a few calls (a big key made by few commands: not a hot one)."""
    client.delete(key)
    for start in range(0, fields, chunk):
        client.hset(key, mapping={f"f{i}": f"value-{i}" for i in range(start, min(fields, start + chunk))})


def big_key_report(client: redis.Redis, port: int) -> tuple[list[Biggest], str]:
    """Run ``--bigkeys``; the biggest key per type (with ``MEMORY USAGE ... SAMPLES 0``) and the raw output."""
    out = redis_cli(port, "--bigkeys").stdout
    found = []
    for kind, key, size, unit in _BIGGEST.findall(out):
        usage = client.memory_usage(key, samples=0) or 0
        found.append(Biggest(kind, key, int(size), unit, int(usage)))
    return found, out


def mem_key_report(port: int) -> tuple[dict[str, tuple[str, int]], str]:
    """Run ``--memkeys``: type -> (its biggest key by ``MEMORY USAGE``, bytes), and the raw output."""
    out = redis_cli(port, "--memkeys").stdout
    return {kind: (key, int(size)) for kind, key, size, _ in _BIGGEST.findall(out)}, out


@dataclass(frozen=True)
class HotKeys:
    refused: str  # what --hotkeys says under a non-LFU policy
    policy_before: str
    found: list[tuple[str, int]]  # (key, LFU counter), hottest first
    freq: int  # OBJECT FREQ of the key that was made hot
    output: str
    freq_before_switch: dict[str, int]  # OBJECT FREQ, under LFU, of keys written before the switch
    freq_written_under_lfu: int  # OBJECT FREQ of a hash created after the switch, in the same MULTI


def hot_key_report(client: redis.Redis, port: int, hot_key: str, reads: int = 20_000,
                   written_before: tuple[str, ...] = ()) -> HotKeys:
    """``--hotkeys`` under the current policy (refused unless LFU), then under ``allkeys-lfu`` after ``reads`` GETs.

    Switching the policy at runtime does not give old keys an LFU history: their counter field held
    LRU data, and ``OBJECT FREQ`` of the keys ``written_before`` reads (near) 0 however often they were
    used. A key written after the switch starts at 5 (Redis's ``LFU_INIT_VAL``, so that a new key
    is not evicted first); ``hot_key + ":written"`` shows it: its HSET and its ``OBJECT FREQ`` go in
    one ``MULTI``, whose commands all see the same clock, so no minute of decay can pass between
    them. (Read after more accesses, the counter is a draw: each one adds 1 with a probability of
    1 / ((counter - 5) * lfu-log-factor + 1); ten HSET calls leave it at 9 or more about once in
    160 runs.) The policy is put back.
    """
    policy = str(client.config_get("maxmemory-policy")["maxmemory-policy"])
    refused = redis_cli(port, "--hotkeys")
    refusal = (refused.stdout + refused.stderr).strip().splitlines()
    try:
        client.config_set("maxmemory-policy", "allkeys-lfu")
        before = {key: int(client.object("freq", key) or 0) for key in written_before}
        written = hot_key + ":written"
        with client.pipeline(transaction=True) as pipe:
            pipe.hset(written, "f0", "v")
            pipe.object("freq", written)
            _, written_freq_reply = pipe.execute()
        written_freq = int(written_freq_reply or 0)
        client.set(hot_key, "v")
        pipe = client.pipeline(transaction=False)
        for _ in range(reads):
            pipe.get(hot_key)
        pipe.execute()
        out = redis_cli(port, "--hotkeys").stdout
        freq = int(client.object("freq", hot_key) or 0)
    finally:
        client.config_set("maxmemory-policy", policy)
    found = [(key, int(counter)) for counter, key in _HOT.findall(out)]
    found.sort(key=lambda kc: -kc[1])
    refused_line = next((line for line in refusal if "lfu" in line.lower()), " ".join(refusal))
    return HotKeys(refused_line, policy, found, freq, out, before, written_freq)


@dataclass(frozen=True)
class EvictionSeen:
    """What eviction did to a stream on a scraped node, and what Prometheus saw of it."""

    cache_keys_written: int
    stream_exists_after: bool
    consumer_error: str
    length_before: float | None  # redis_stream_length of the stream as scraped before
    length_after: float | None  # the same after the eviction (None: the series is gone)
    evicted_keys: float  # increase of redis_evicted_keys_total over the experiment
    fired: Fired  # RedisEvictingKeys


def _batches(keys: Iterator[T], size: int = 500) -> Iterator[list[T]]:
    batch: list[T] = []
    for key in keys:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _stream_length(api: PrometheusAPI, node: str, stream: str) -> float | None:
    result = api.query(f'redis_stream_length{{node="{node}",stream="{stream}"}}')
    return float(result[0]["value"][1]) if result else None


def wait_scraped(api: PrometheusAPI, node: str, stream: str, length: int, timeout_s: float = 15.0) -> float:
    """Poll until Prometheus has scraped ``stream`` on ``node`` at its full ``length``; that length.

    A scrape can land while the stream is being written (or show a previous run's series): the
    figure read before the fault is the one that matches what Redis holds, not the first one seen.
    """
    seen = poll_value(lambda: _stream_length(api, node, stream), lambda n: n == length, timeout_s, 0.5)
    if seen != length:
        raise TimeoutError(f"Prometheus did not scrape {stream} on {node} at length {length} within "
                           f"{timeout_s:g} s (last seen: {seen})")
    return length


def evict_stream(
    client: redis.Redis, api: PrometheusAPI, node: str, prefix: str, *, timeout_s: float = 30.0
) -> EvictionSeen:
    """Notebook 01's eviction under ``allkeys-lru`` on a scraped node, then what the scrapes and alerts show.

    Once Prometheus has seen the stream, ``maxmemory`` goes to what the node uses plus
    :data:`eviction.HEADROOM_BYTES` under ``allkeys-lru``, and the cache fills until the stream is
    gone. The limit and the policy stay until ``RedisEvictingKeys`` fires and the stream's series
    are gone from Prometheus (as a real policy would stay), then both are put back and the cache
    keys (``<prefix>cache:*``) deleted.
    """
    stream = f"{prefix}evict:orders"
    client.delete(stream)
    eviction.prepare_queue(client, stream)
    before = wait_scraped(api, node, stream, int(client.xlen(stream)))
    policy = str(client.config_get("maxmemory-policy")["maxmemory-policy"])
    eviction.wait_idle(client, stream, int(eviction.LRU_TICK_S))
    fault_at = time.time()
    try:
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + eviction.HEADROOM_BYTES)
        written, _ = eviction.fill_cache(client, f"{prefix}cache:", stream)
        exists = bool(client.exists(stream))
        consumer_error = eviction.reply_error(
            lambda: client.xreadgroup(eviction.GROUP, eviction.CONSUMER, {stream: ">"}, count=1)
        )
        fired = wait_fired(api, {"RedisEvictingKeys": {"node": node}}, fault_at=fault_at, timeout_s=timeout_s)
        after = _wait_gone(api, node, stream, fault_at + timeout_s)
    finally:
        client.config_set("maxmemory", 0)
        client.config_set("maxmemory-policy", policy)
        for batch in _batches(client.scan_iter(match=f"{prefix}cache:*", count=1000)):
            client.delete(*batch)
    window_s = max(1, int(time.time() - fault_at + 3))
    evicted = api.query(f'increase(redis_evicted_keys_total{{node="{node}"}}[{window_s}s])')
    return EvictionSeen(written, exists, consumer_error, before, after,
                        float(evicted[0]["value"][1]) if evicted else 0.0, fired["RedisEvictingKeys"])


def _wait_gone(api: PrometheusAPI, node: str, stream: str, until: float) -> float | None:
    """Poll until the stream's length series is gone (stale) or ``until`` (unix time); the last value."""
    return poll_value(lambda: _stream_length(api, node, stream), lambda length: length is None,
                      max(0.0, until - time.time()), 0.5)
