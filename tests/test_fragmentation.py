"""labs.experiments.fragmentation: real fragmentation on a throwaway redis-server, and RedisFragmented both ways."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

import pytest
from require_support import tagged

from labs.experiments import eviction, fragmentation
from labs.launcher import prom_binaries

pytestmark = pytest.mark.timeout(120)


def test_deleting_two_values_of_three_fragments_the_allocator(tmp_path: Path) -> None:
    with eviction.throwaway_redis(tmp_path, policy="noeviction", headroom_bytes=256 << 20) as proc, \
            contextlib.closing(proc.client(30.0)) as client:
        small = fragmentation.MemoryView.read(client)
        made = fragmentation.fragment(client, keys=60_000, value_bytes=1_000)
        purged = fragmentation.purge(client)
        defrag = fragmentation.try_activedefrag(client, wait_s=5.0)
        report = fragmentation.doctor(client)
    assert small.mem_fragmentation_ratio > 1.5 and small.allocator_frag_bytes < 16 << 20  # the small-node look
    assert made.keys_left == 20_000
    assert made.filled.is_fresh and made.fragmented.is_fresh  # each read after serverCron sampled the change
    assert made.filled.allocator_frag_ratio < 1.1  # full pages
    assert made.fragmented.allocator_frag_ratio > 1.5 and made.fragmented.allocator_frag_bytes > 20 << 20
    assert made.fragmented.rss_bytes > 0.9 * made.filled.rss_bytes  # the pages stay with the process
    assert purged.allocator_frag_ratio > 1.5  # MEMORY PURGE returns only pages no value uses
    if defrag.refusal is not None:  # Debian's build: no defrag-capable jemalloc
        assert "Jemalloc" in defrag.refusal
    else:
        assert defrag.after is not None and defrag.after.allocator_frag_ratio < made.fragmented.allocator_frag_ratio
    assert "fragmentation" in report


@pytest.mark.skipif(bool(prom_binaries.missing()), reason=tagged("monitoring", prom_binaries.missing() or "ok"))
def test_the_rule_fires_on_fragmented_pages_and_not_on_a_small_node() -> None:
    fragmented = fragmentation.MemoryView(
        used_bytes=58_132_232, rss_bytes=180_240_384, mem_fragmentation_ratio=2.76,
        mem_fragmentation_bytes=122_108_152, allocator_allocated_bytes=65_915_672,
        allocator_active_bytes=168_173_568, allocator_frag_ratio=2.55, allocator_frag_bytes=102_257_896,
    )
    assert fragmentation.rule_fires(fragmented)
    small = replace(fragmented, mem_fragmentation_ratio=13.6, mem_fragmentation_bytes=11_561_696,
                    allocator_frag_ratio=2.86, allocator_frag_bytes=3_548_392)
    assert not fragmentation.rule_fires(small)
    after_peak = replace(small, mem_fragmentation_ratio=44.6, mem_fragmentation_bytes=69_563_648,
                         allocator_frag_ratio=1.24, allocator_frag_bytes=479_232)
    assert not fragmentation.rule_fires(after_peak)
