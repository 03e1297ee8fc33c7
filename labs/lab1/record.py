"""What lab 1 records while it runs, independently of the implementation under test.

The producer's log (the IDs that ``XADD`` returned), every call of the simulated work with
its outcome, the rescuer's journal, worker errors and periodic samples of the stream. The
checks compare these records with each other and with Redis; they never take the
implementation's word for what happened.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from labs.lab1.settings import Lab1Settings


@dataclass(frozen=True)
class Sent:
    """One acknowledged XADD: the producer holds an ID for ``counter``."""

    counter: int
    msg_id: str
    t_s: float


@dataclass(frozen=True)
class Handled:
    """One call of the work for a message: who ran it, whether it succeeded, and what Redis said
    of the message at that moment: still in the PEL (it must be: XACK comes after the work),
    held by which consumer, delivered how many times (``XPENDING stream group id id 1``)."""

    counter: int
    msg_id: str
    worker: str
    ok: bool
    in_pel: bool
    t_s: float
    owner: str | None = None
    deliveries: int | None = None


@dataclass(frozen=True)
class Journal:
    """One rescuer journal line: ``to_consumer`` took ``msg_id`` from ``from_consumer``."""

    msg_id: str
    counter: int | None
    from_consumer: str
    to_consumer: str
    deliveries: int
    ok: bool
    t_s: float


@dataclass(frozen=True)
class WorkerError:
    worker: str
    error: str
    t_s: float


@dataclass(frozen=True)
class Returned:
    """What one ``consume_once`` call returned (it should be how many it processed and acked)."""

    worker: str
    value: object


@dataclass(frozen=True)
class Sample:
    """The stream every ``sample_interval_ms``: XLEN, XPENDING per consumer, counts so far."""

    t_s: float
    length: int
    pending_by_consumer: dict[str, int]
    sent: int
    processed: int

    @property
    def pending(self) -> int:
        return sum(self.pending_by_consumer.values())


class Recorder:
    """Thread-safe lists of what happened; time is seconds since the recorder was made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self.sent: list[Sent] = []
        self.send_errors: list[WorkerError] = []
        self.handled: list[Handled] = []
        self.journal: list[Journal] = []
        self.errors: list[WorkerError] = []
        self.samples: list[Sample] = []
        self.returns: list[Returned] = []
        self.counter_of: dict[str, int] = {}

    def now_s(self) -> float:
        return time.monotonic() - self._started

    def add_sent(self, counter: int, msg_id: str) -> None:
        with self._lock:
            self.sent.append(Sent(counter, msg_id, self.now_s()))
            self.counter_of[msg_id] = counter

    def add_send_error(self, counter: int, exc: BaseException) -> None:
        with self._lock:
            self.send_errors.append(WorkerError(f"producer #{counter}", _describe(exc), self.now_s()))

    def add_handled(self, counter: int, msg_id: str, worker: str, *, ok: bool, in_pel: bool,
                    owner: str | None = None, deliveries: int | None = None) -> None:
        with self._lock:
            self.handled.append(Handled(counter, msg_id, worker, ok, in_pel, self.now_s(), owner, deliveries))

    def add_return(self, worker: str, value: object) -> None:
        with self._lock:
            self.returns.append(Returned(worker, value))

    def add_journal(
        self, msg_id: str, from_consumer: str, to_consumer: str, deliveries: int, *, ok: bool
    ) -> None:
        with self._lock:
            counter = self.counter_of.get(msg_id)
            self.journal.append(
                Journal(msg_id, counter, from_consumer, to_consumer, deliveries, ok, self.now_s())
            )

    def add_error(self, worker: str, exc: BaseException) -> None:
        with self._lock:
            self.errors.append(WorkerError(worker, _describe(exc), self.now_s()))

    def add_sample(self, length: int, pending_by_consumer: dict[str, int]) -> Sample:
        with self._lock:
            processed = len({h.counter for h in self.handled if h.ok})
            sample = Sample(self.now_s(), length, pending_by_consumer, len(self.sent), processed)
            self.samples.append(sample)
            return sample

    def handled_counters(self) -> set[int]:
        """The events the work was called for, whatever the outcome."""
        with self._lock:
            return {h.counter for h in self.handled}

    def processed_counters(self) -> set[int]:
        with self._lock:
            return {h.counter for h in self.handled if h.ok}


@dataclass
class ScenarioResult:
    """Everything one run of the scenario left behind, for the checks and the report."""

    settings: Lab1Settings
    stream: str
    group: str
    recorder: Recorder
    pending_end: int = -1
    pending_end_by_consumer: dict[str, int] = field(default_factory=dict)
    length_end: int = -1
    produce_s: float = 0.0
    drain_s: float = 0.0
    drained: bool = False


def _describe(exc: BaseException) -> str:
    """``Type: message``, and the Redis command that raised it when the client noted one."""
    text = str(exc) or "(no message)"
    notes = "; ".join(getattr(exc, "__notes__", []))
    return f"{type(exc).__name__}: {text}" + (f" ({notes})" if notes else "")
