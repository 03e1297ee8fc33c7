"""Lab 3 (course module 3): a billing worker that survives failover and SIGTERM, measured.

``make lab-3`` (``python -m labs.lab3``) runs, on the native Sentinel topology, a producer at
50 events/s and three workers ``billing-1..3`` (the reference ``billing-worker`` or the
command in ``WORKER=``) in four modes (normal, crash, failover, SIGTERM) for each dedupe
strategy (none, redis, sqlite), and reports sent / re-sent / confirmed / unknown / refused,
charged once, lost, duplicated, duplicate deliveries, dead-lettered, failed attempts,
redeliveries, downtime and time to recover, all taken from records the worker does not
write (the producer's log, the SQLite ledger, Redis sampled during the run).

From Python (notebook 08 does this)::

    from labs.lab3 import run_lab
    result = run_lab(quick=True, progress=lambda text, fraction: print(text))
    result.passed                 # every check passed
    result.report.tables[0]       # the modes x strategies table
    result.report.notes           # the conclusions in words
    result.paths.html             # reports/lab3-<timestamp>/report.html

Modules: :mod:`~labs.lab3.settings` (timings, presets), :mod:`~labs.lab3.deployment` (the
topology: addresses, failover, write pauses), :mod:`~labs.lab3.contract` (how a worker is
started: flags and environment), :mod:`~labs.lab3.cell`, :mod:`~labs.lab3.scenario` and
:mod:`~labs.lab3.faults` (one mode's cells under load, with the fault),
:mod:`~labs.lab3.sampler`, :mod:`~labs.lab3.deliveries`, :mod:`~labs.lab3.record`,
:mod:`~labs.lab3.probe` and :mod:`~labs.lab3.measure` (the records and the figures),
:mod:`~labs.lab3.checks`, :mod:`~labs.lab3.conclusions`,
:mod:`~labs.lab3.figures`, :mod:`~labs.lab3.summary` (the report), :mod:`~labs.lab3.run`
(``python -m labs.lab3``) and :mod:`~labs.lab3.check` (``make check-lab-3``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labs.lab3.run import Lab3Report


def run_lab(**kwargs: Any) -> Lab3Report:
    """Run the lab and return its :class:`~labs.lab3.run.Lab3Report` (see :func:`labs.lab3.run.run_lab`)."""
    from labs.lab3.run import run_lab as _run_lab

    return _run_lab(**kwargs)


__all__ = ["run_lab"]
