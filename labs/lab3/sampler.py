"""A thread that samples every cell's group through Sentinel while a phase runs.

Each round takes, per cell, ``XINFO GROUPS``/``XINFO STREAM`` (pending, lag) and the
extended ``XPENDING`` (every pending entry with its holder, idle time and delivery count);
:mod:`labs.lab3.deliveries` turns the latter into failed attempts and redeliveries. A call
that fails leaves a gap (None), never a guess.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence

import redis

from labs.lab3.cell import GROUP, Cell
from labs.lab3.deliveries import PelSample
from labs.lab3.deployment import Deployment
from labs.lab3.record import Sample
from labs.lab3.streams import CellStreams


class Sampler:
    """The groups of ``cells`` every ``interval_s``, each read through its :class:`CellStreams`, on a
    client of the sampler's own from ``site`` (closed when the sampler stops)."""

    def __init__(self, cells: Sequence[Cell], site: Deployment, interval_s: float) -> None:
        self.cells = list(cells)
        self.client = site.client()
        self.streams: dict[str, CellStreams] = {c.name: site.cell_streams(self.client, c.stream) for c in self.cells}
        self.interval_s = interval_s
        self.samples: dict[str, list[Sample]] = {c.name: [] for c in self.cells}
        self.pels: dict[str, list[PelSample]] = {c.name: [] for c in self.cells}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab3-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.client.close()

    def sample_once(self) -> None:
        for cell in self.cells:
            t = time.time()
            streams = self.streams[cell.name]
            try:
                state = streams.group_state(GROUP)
                entries = streams.pel(GROUP) if state else ()
            except (redis.RedisError, OSError):
                state, entries = None, None
            self.samples[cell.name].append(Sample(t, state.pending, state.lag) if state else Sample(t, None, None))
            self.pels[cell.name].append(PelSample(t, entries))

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
