"""Garbage-collector settings for a process whose job is to run the worker.

CPython frees almost every object by reference counting; its cyclic garbage collector only
looks for reference cycles. By default it scans the youngest objects every 700 net
allocations of container objects. The worker makes a few per message (the delivery, the
event, the charge) and frees them a batch later: a measured run of 200,000 messages made
891 collections (about 200 a second), and they found nothing, because the per-message path
makes no cycles (``tests/test_gc_tuning.py`` counts them). Those collections took about 6%
of the worker's CPU (``gc.callbacks``).

:func:`tune_for_throughput` is what ``billing-worker`` calls once at start-up, before the
event loop (``make bench`` calls it too, for the worker and the ceiling alike, which share
its process):

- ``gc.freeze()``: what start-up made (modules, clients, settings) moves to a permanent
  generation that full collections no longer walk;
- a youngest generation of :data:`GEN0_THRESHOLD`: a collection after that many new
  container objects still alive. A worker holds a bounded number of messages (``--count``
  and ``--parallelism`` set it), a few objects each: in the measured run it never got there
  (0 collections). Cycles are still collected when it does.

A library call never changes these settings: an application that embeds :class:`Worker`
keeps its own.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

GEN0_THRESHOLD = 10_000


def tune_for_throughput(gen0_threshold: int = GEN0_THRESHOLD) -> None:
    """Freeze what exists now and raise the youngest generation's threshold (older ones keep theirs)."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    log.debug("gc: %s objects frozen, thresholds %s", gc.get_freeze_count(), gc.get_threshold())
