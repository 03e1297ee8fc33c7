"""Where a comparison's expected faults go: the scenario's log file, not the terminal or the cell.

A planned kill -9 makes nats-py log its reconnects and aiormq its "connection reset" with their
tracebacks, and the producer's sender a line per failed XADD: faults the scenario caused on purpose.
:func:`to_file` sends those libraries' records (and this package's) to one log file and nowhere
else; the run's table says what happened, and the file keeps the detail.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NOISY = ("nats", "aiormq", "aio_pika", "solutions", "labs.compare", "labs.launcher", "asyncio")


@contextmanager
def to_file(path: Path, level: int = logging.INFO) -> Iterator[Path]:
    """Records of :data:`NOISY` loggers go to ``path`` only while inside; restored after."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    for name in NOISY:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    try:
        yield path
    finally:
        for logger, level_before, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level_before)
            logger.propagate = propagate
        handler.close()


def count(path: Path, level: str = "WARNING") -> int:
    """Records at ``level`` or above in the log (for the one line a cell prints)."""
    levels = ("WARNING", "ERROR", "CRITICAL") if level == "WARNING" else ("ERROR", "CRITICAL")
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if any(f" {lv} " in line for lv in levels))
