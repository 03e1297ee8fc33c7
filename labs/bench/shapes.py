"""The event shapes the process rows are measured on: what producers really send on ``orders``.

The contract (DESIGN.md) names four fields and allows more; real producers add them (a
sequence number, a trace id, ``produced_at_ms``), write them in their own order, and send
order ids that are not ASCII. The worker's parse must cost the same on each (issue 32), so
the bench measures each.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable

from redis.typing import EncodableT, FieldT

from labs.experiments.ceiling import order_fields

Fields = dict[FieldT, EncodableT]


def four(i: int) -> Fields:
    """billing-producer's fields, in its order (the ceiling's events)."""
    return order_fields(i)


def plus_one(i: int) -> Fields:
    """The same plus the course lab producer's ``seq`` counter."""
    return {**four(i), "seq": str(i)}


def plus_five(i: int) -> Fields:
    """The same plus five fields a real producer adds (sequence, trace, source, currency, time)."""
    return {**four(i), "seq": str(i), "trace_id": uuid.uuid4().hex, "source": "web", "currency": "EUR",
            "produced_at_ms": str(1_700_000_000_000 + i)}


def reordered(i: int) -> Fields:
    """The four fields, in another producer's order."""
    return dict(reversed(list(four(i).items())))


def produced_at(i: int) -> Fields:
    """The four fields and the contract's optional ``produced_at_ms``."""
    return {**four(i), "produced_at_ms": str(1_700_000_000_000 + i)}


def non_ascii(i: int) -> Fields:
    """An order id in Cyrillic (UTF-8, two bytes a letter)."""
    return {**four(i), "order_id": f"заказ-{i % 1000}"}


def random_ids(i: int) -> Fields:
    """The four fields with a random ``event_id`` (uuid4 hex, as many producers make them): the
    same parse, but each claim of ``--dedupe sqlite`` lands on a random leaf of
    ``applied_events`` (see :mod:`solutions.event_ids`). Diagnosis, not a target: the price of
    a producer's choice, shown beside the time-ordered ids billing-producer sends."""
    return {**four(i), "event_id": uuid.uuid4().hex}


SHAPES: dict[str, Callable[[int], Fields]] = {
    "four fields": four,
    "+1 field (seq)": plus_one,
    "+5 fields": plus_five,
    "reordered": reordered,
    "produced_at_ms": produced_at,
    "non-ASCII order_id": non_ascii,
    "random event ids": random_ids,
}
DIAGNOSIS_SHAPES = frozenset({"random event ids"})  # measured and shown, no target: a producer's choice


def shape_names(text: str) -> tuple[str, ...]:
    """``--shapes "four fields,+5 fields"`` -> the names, each one of :data:`SHAPES`."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SHAPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown shape {', '.join(map(repr, unknown)) or '(none given)'}; "
                                         f"choose from: {', '.join(SHAPES)}")
    return names
