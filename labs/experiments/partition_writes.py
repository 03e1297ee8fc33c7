"""Writers for the partition experiments: one ``RPUSH`` of a counter per tick, each outcome recorded.

A writer runs in a thread that lives in a network namespace (:func:`labs.launcher.netns.run_thread`),
so its sockets are a client on one side of the partition. Every attempt is recorded by the writer
itself, never by Redis: ``acked`` (the server replied OK; with ``wait_ms`` also ``WAIT`` saw a
replica), ``unconfirmed`` (applied, but ``WAIT`` saw no replica in time), ``refused`` (an error
reply: ``NOREPLICAS``, ``READONLY``, ``CLUSTERDOWN`` ...), ``unknown`` (a timeout or a broken
connection: maybe applied, maybe not). :func:`lost` then compares the acknowledged counters with
what the surviving master holds. Used by :mod:`labs.experiments.split_brain` and
:mod:`labs.experiments.cluster_minority`; tests in ``tests/test_split_brain.py``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import plotly.graph_objects as go
import redis

from labs.polling import wait_until

OUTCOMES = ("acked", "unconfirmed", "refused", "unknown")


@dataclass(frozen=True)
class Write:
    """One attempt: when it was sent (s from the partition), how long it took, the counter, the outcome."""

    t_s: float
    latency_s: float
    value: int
    outcome: str
    error: str = ""


@dataclass
class Writer:
    """``RPUSH key <n>`` every ``interval_s`` (plus ``WAIT 1 wait_ms`` when set) until ``stop``."""

    name: str
    key: str
    interval_s: float = 0.01
    wait_ms: int | None = None
    records: list[Write] = field(default_factory=list)
    origin: float = field(default_factory=time.monotonic)  # moved to the partition's moment by the experiment

    def run(self, connect: Callable[[], redis.Redis], stop: threading.Event) -> None:
        """The thread's body: ``connect`` is called here, so the client's sockets live in this thread's namespace."""
        client = connect()
        n = 0
        try:
            while not stop.is_set():
                n += 1
                sent = time.monotonic()
                outcome, error = self._write(client, n)
                self.records.append(Write(sent, time.monotonic() - sent, n, outcome, error))
                stop.wait(max(0.0, self.interval_s - (time.monotonic() - sent)))
        finally:
            client.close()

    def _write(self, client: redis.Redis, n: int) -> tuple[str, str]:
        try:
            client.rpush(self.key, n)
        except redis.ResponseError as exc:  # NOREPLICAS, READONLY, CLUSTERDOWN, MOVED: not applied
            return "refused", _reason(exc)
        except redis.RedisError as exc:  # a timeout or a reset: the client cannot know
            return "unknown", type(exc).__name__
        if self.wait_ms is None:
            return "acked", ""
        try:
            replicas = int(client.wait(1, self.wait_ms))
        except redis.RedisError as exc:
            return "unknown", type(exc).__name__
        return ("acked", "") if replicas >= 1 else ("unconfirmed", "WAIT 0")

    def timeline(self, origin: float) -> tuple[Write, ...]:
        """The records with times in s from ``origin`` (the partition's moment)."""
        return tuple(Write(w.t_s - origin, w.latency_s, w.value, w.outcome, w.error) for w in list(self.records))

    def count(self, outcome: str) -> int:
        return sum(1 for w in list(self.records) if w.outcome == outcome)


def _reason(exc: redis.ResponseError) -> str:
    """``NOREPLICAS``, ``ReadOnlyError``, ``ClusterDownError``, ``MovedError`` ...: the error's name."""
    return type(exc).__name__ if type(exc) is not redis.ResponseError else str(exc).split(" ", 1)[0]


@dataclass(frozen=True)
class WriterResult:
    """One writer's attempts and which acknowledged counters the surviving master lacks."""

    name: str
    side: str
    writes: tuple[Write, ...]
    lost_values: frozenset[int]

    @property
    def acked(self) -> int:
        return sum(1 for w in self.writes if w.outcome == "acked")

    @property
    def lost(self) -> int:
        return len(self.lost_values)

    def acked_after(self, t_s: float) -> tuple[Write, ...]:
        return tuple(w for w in self.writes if w.outcome == "acked" and w.t_s >= t_s)

    def failed_after(self, t_s: float) -> tuple[Write, ...]:
        """The attempts sent at ``t_s`` or later (s from the partition) that were not acknowledged.
        From 0: what the partition may have caused; an attempt before it that timed out is the
        machine's hiccup, not the fault's (the cut waits for the writers' first acknowledgements)."""
        return tuple(w for w in self.writes if w.outcome != "acked" and w.t_s >= t_s)

    @property
    def last_ack_s(self) -> float:
        """The last acknowledged write after the partition (s from it); 0 when none came."""
        return max((w.t_s for w in self.acked_after(0.0)), default=0.0)

    @property
    def last_lost_s(self) -> float:
        return max((w.t_s for w in self.writes if w.value in self.lost_values), default=0.0)

    def outcomes(self) -> dict[str, int]:
        return {o: sum(1 for w in self.writes if w.outcome == o) for o in OUTCOMES}

    def median_latency_ms(self, start_s: float, end_s: float) -> float | None:
        """Median latency of the attempts sent in ``[start_s, end_s)`` (None when there were none)."""
        picked = [w.latency_s * 1000 for w in self.writes if start_s <= w.t_s < end_s]
        return statistics.median(picked) if picked else None


def result(writer: Writer, side: str, kept: Iterable[bytes | str | int], origin: float) -> WriterResult:
    """Compare the writer's acknowledged counters with ``kept`` (``LRANGE key 0 -1`` on the survivor)."""
    held = {int(v) for v in kept}
    writes = writer.timeline(origin)
    lost_values = frozenset(w.value for w in writes if w.outcome == "acked" and w.value not in held)
    return WriterResult(writer.name, side, writes, lost_values)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> float:
    """Poll ``check`` until true; the monotonic time it became true (``TimeoutError`` naming ``what``)."""
    def became_true() -> float | None:
        return time.monotonic() if check() else None

    moment = wait_until(became_true, timeout_s, what, poll_s)
    assert moment is not None  # wait_until returns a truthy value
    return moment


# The charts' words: Russian in the notebooks (students read them), English in the lab's report.
CHART_WORDS: dict[str, dict[str, str]] = {
    "ru": {"cut": "разрез", "promoted": "повышение", "heal": "сеть вернулась", "demoted": "понижение",
           "lost": "подтверждено, потом потеряно", "x": "с от разреза", "y": "подтверждённых записей",
           "a": "a: сторона старого мастера", "a2": "a2: сторона старого мастера, WAIT 1",
           "b": "b: сторона Sentinel", "a-cluster": "a: отрезанный мастер", "b-cluster": "b: тот же слот, большинство",
           "other": "другой шард, большинство", "ms": "мс",
           "split-title": "Split brain под Sentinel: подтверждённые записи по клиентам",
           "minority-title": "Меньшинство кластера: подтверждённые записи по клиентам"},
    "en": {"cut": "cut", "promoted": "promoted", "heal": "heal", "demoted": "demoted", "lost": "acked, then lost",
           "x": "s from the partition", "y": "acked writes", "a": "a: old master's side",
           "a2": "a2: old master's side, WAIT 1", "b": "b: sentinels' side", "a-cluster": "a: cut-off master",
           "b-cluster": "b: same slot, majority", "other": "other shard, majority", "ms": "ms",
           "split-title": "Split brain under Sentinel: acknowledged writes per client",
           "minority-title": "The cluster's minority side: acknowledged writes per client"},
}


def add_acked_traces(fig: go.Figure, writer: WriterResult, row: int, *, name: str, line: Mapping[str, object],
                     lost_name: str = CHART_WORDS["ru"]["lost"]) -> None:
    """``writer``'s acknowledged writes as a rising line in ``row`` of ``fig``, and the ones later
    lost as black dots on it (the same legend entries in every row, shown in the first)."""
    acked = [x for x in writer.writes if x.outcome == "acked"]
    fig.add_trace(go.Scatter(x=[x.t_s for x in acked], y=list(range(1, len(acked) + 1)), mode="lines",
                             name=name, line=dict(line), legendgroup=writer.name, showlegend=row == 1), row=row, col=1)
    lost = [(x.t_s, i) for i, x in enumerate(acked, start=1) if x.value in writer.lost_values]
    if lost:
        fig.add_trace(go.Scatter(x=[t for t, _ in lost], y=[i for _, i in lost], mode="markers",
                                 marker={"color": "black", "size": 2, "opacity": 0.5}, name=lost_name,
                                 legendgroup="lost", showlegend=row == 1), row=row, col=1)
