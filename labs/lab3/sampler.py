"""A thread that samples every cell's group (pending, lag) through Sentinel while a phase runs."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence

import redis

from labs.lab3.cell import GROUP, Cell
from labs.lab3.probe import group_state, master_client
from labs.lab3.record import Sample


class Sampler:
    """``XINFO GROUPS`` of each cell every ``interval_s``; a failed call leaves a gap (None)."""

    def __init__(self, cells: Sequence[Cell], sentinels: Sequence[tuple[str, int]], master_name: str,
                 interval_s: float) -> None:
        self.cells = list(cells)
        self.client = master_client(sentinels, master_name)
        self.interval_s = interval_s
        self.samples: dict[str, list[Sample]] = {c.name: [] for c in self.cells}
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
            try:
                state = group_state(self.client, cell.stream, GROUP)
            except (redis.RedisError, OSError):
                state = None
            sample = Sample(t, state.pending, state.lag) if state else Sample(t, None, None)
            self.samples[cell.name].append(sample)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
