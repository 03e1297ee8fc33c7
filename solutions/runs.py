"""How a read batch becomes *runs*: the units a :class:`~solutions.pipeline.Pipeline` starts as tasks.

:func:`split_runs` makes the whole batch one run when the handler is instant (its work never
waits), else one run per lane key (``--order-key``), so that waiting handlers overlap while the
messages of one key keep their stream order. :func:`split_echoes` takes the second and later
copies of one event out of a run (with dedupe on, the event is done once and its echoes wait
for it). :func:`ids_text` is how the log lines name a list of message ids.
"""

from __future__ import annotations

from collections.abc import Iterator

from solutions.messages import Delivery, OrderEvent

Item = tuple[Delivery, OrderEvent]
ALL_LANES = "*"  # the lane of an instant handler's runs: each batch in line behind the previous one


def split_runs(
    deliveries: list[Delivery], *, instant: bool, order_key: str
) -> Iterator[tuple[list[str], list[Delivery]]]:
    """``(lanes, deliveries)`` per run, in stream order: an instant handler's batch is one run on
    :data:`ALL_LANES`; otherwise one run per value of ``order_key`` (a message without one, or
    with no ``order_key`` at all, is a run of its own on no lane)."""
    if not deliveries:
        return
    if instant:
        yield [ALL_LANES], deliveries
        return
    by_lane: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        lane = delivery.text(order_key) if order_key else None
        if lane is None:
            yield [], [delivery]
        else:
            by_lane.setdefault(lane, []).append(delivery)
    for lane, run in by_lane.items():
        yield [lane], run


def split_echoes(todo: list[Item]) -> tuple[list[Item], list[tuple[Delivery, str]]]:
    """With dedupe on, a run carrying the same event twice does it once; the echoes wait for it."""
    first: dict[str, Item] = {}
    echoes: list[tuple[Delivery, str]] = []
    for delivery, event in todo:
        if event.dedupe_key in first:
            echoes.append((delivery, event.dedupe_key))
        else:
            first[event.dedupe_key] = (delivery, event)
    return (list(first.values()), echoes) if echoes else (todo, [])


def ids_text(ids: list[str], most: int = 10) -> str:
    """Message ids for a log line: the first ``most``, then how many more."""
    more = f" (+{len(ids) - most} more)" if len(ids) > most else ""
    return ",".join(ids[:most]) + more
