"""A batch of charges as it travels from the handler to the ledger: flat, one list per batch.

:class:`Charges` is what :meth:`~solutions.handler.Handler.charges` makes for a run and what
:meth:`~solutions.ledger.Ledger.write_batches` binds: :data:`WIDTH` values per charge
(``event_id, order_id, amount, msg_id``) in one list, the consumer once. :class:`Charge` is the
readable form of one charge (tests, tools); :func:`batches_of` turns those into batches.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

WIDTH = 4  # the values of a charge in :attr:`Charges.rows`: event_id, order_id, amount, msg_id


@dataclass(slots=True)
class Charge:
    """One charge to write, the readable way (tests, tools); the worker writes :class:`Charges`."""

    event_id: str
    order_id: str
    amount: str
    msg_id: str
    consumer: str


@dataclass(slots=True)
class Charges:
    """A batch of one consumer's charges, flat, as the ledger binds them: :data:`WIDTH` values
    per charge (``event_id, order_id, amount, msg_id``) in one list.

    This is how a run's charges travel from the handler to the ledger: an object per charge
    (a :class:`Charge`) cost about 1 us a message, a fifth of the worker's own time with
    ``--dedupe none``; a tuple added to a list costs a tenth of that.
    """

    consumer: str
    rows: list[str] = field(default_factory=list)

    def add(self, event_id: str, order_id: str, amount: str, msg_id: str) -> None:
        self.rows += (event_id, order_id, amount, msg_id)

    def __len__(self) -> int:
        return len(self.rows) // WIDTH

    def __iter__(self) -> Iterator[Charge]:
        rows, consumer = self.rows, self.consumer
        for i in range(0, len(rows), WIDTH):
            yield Charge(rows[i], rows[i + 1], rows[i + 2], rows[i + 3], consumer)

    @property
    def event_ids(self) -> list[str]:
        return self.rows[0::WIDTH]

    @property
    def claims(self) -> list[str]:
        """``event_id, msg_id`` of each charge, flat: the ``applied_events`` rows (made in C)."""
        return list(itertools.chain.from_iterable(zip(self.rows[0::WIDTH], self.rows[3::WIDTH], strict=True)))

    def only(self, keep: Sequence[bool]) -> Charges:
        """The charges whose ``keep`` is True, in order."""
        rows = self.rows
        kept: list[str] = []
        for n, ok in enumerate(keep):
            if ok:
                kept += rows[n * WIDTH : (n + 1) * WIDTH]
        return Charges(self.consumer, kept)


def batches_of(charges: Iterable[Charge]) -> list[Charges]:
    """:class:`Charge` objects as batches, one per stretch of the same consumer, in order."""
    batches: list[Charges] = []
    for c in charges:
        if not batches or batches[-1].consumer != c.consumer:
            batches.append(Charges(c.consumer))
        batches[-1].add(c.event_id, c.order_id, c.amount, c.msg_id)
    return batches
