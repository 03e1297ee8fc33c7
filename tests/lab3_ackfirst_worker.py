"""A BROKEN billing worker for the lab-3 checker: it XACKs each message before the work.

It follows lab 3's worker contract (it is the compact reference, ``labs/lab3/worker_reference.py``,
with the order of the XACK and the work swapped: see ``tests/lab3_probe_worker.py``). When
the work fails (every ``--fail-every``-th attempt) the message is already acknowledged,
nobody redelivers it, and the event is lost. ``make check-lab-3`` must say so.
"""

from __future__ import annotations

from lab3_probe_worker import main

if __name__ == "__main__":
    main("ack-first")
