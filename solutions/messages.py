"""Order events: what a message on ``orders`` must look like, and why one is rejected.

A message that can never succeed (a missing field, an amount that is not a positive
decimal, bytes that do not decode, an unknown type or shape) raises :class:`PermanentError`
with a short reason; the worker sends it to the DLQ at once instead of retrying it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

ORDER_PAID = "order.paid"
KNOWN_TYPES = (ORDER_PAID,)
REQUIRED = ("order_id", "amount")
MAX_FIELD_BYTES = 256
RawFields = Mapping[bytes, bytes]


class PermanentError(Exception):
    """The message can never be processed; the reason goes into the DLQ entry's ``error``."""


class TransientError(Exception):
    """The attempt failed but another delivery may succeed: the message is not acked."""


@dataclass(frozen=True)
class Delivery:
    """One message as the group delivered it, with the delivery count Redis keeps for it."""

    msg_id: str
    fields: RawFields | None
    deliveries: int = 1
    source: str = "new"

    @property
    def id_ms(self) -> int:
        """The time part of the message id: when XADD put it in the stream (ms since epoch)."""
        return int(self.msg_id.split("-", 1)[0])

    def text(self, name: str) -> str | None:
        """A field decoded as UTF-8, or None when it is missing or undecodable."""
        if not self.fields:
            return None
        raw = self.fields.get(name.encode())
        if raw is None:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return None


@dataclass(frozen=True)
class OrderEvent:
    """A validated ``order.paid`` event."""

    msg_id: str
    order_id: str
    amount: Decimal
    event_id: str | None
    type: str
    dedupe_key: str


def dedupe_key(stream: str, msg_id: str, event_id: str | None) -> str:
    """The business ``event_id`` when the message has one, else ``<stream>:<msg_id>``."""
    return event_id if event_id else f"{stream}:{msg_id}"


def _decode_all(fields: RawFields) -> dict[str, str]:
    try:
        return {name.decode(): value.decode() for name, value in fields.items()}
    except UnicodeDecodeError:
        pass
    for name, value in fields.items():  # the slow path only to name the bad field
        try:
            name.decode(), value.decode()
        except UnicodeDecodeError as exc:
            raise PermanentError(f"undecodable bytes in field {name!r}: not UTF-8") from exc
    raise AssertionError("unreachable")


def parse_amount(text: str) -> Decimal:
    """A positive, finite decimal (``"12.50"``); PermanentError otherwise."""
    try:
        amount = Decimal(text.strip())
    except InvalidOperation as exc:
        raise PermanentError(f"amount {text[:40]!r} is not a decimal") from exc
    if not amount.is_finite():
        raise PermanentError(f"amount {text[:40]!r} is not a finite decimal")
    if amount <= 0:
        raise PermanentError(f"amount {text[:40]!r} is not positive")
    return amount


def parse_order(stream: str, delivery: Delivery) -> OrderEvent:
    """Validate a delivery as an ``order.paid`` event; raise PermanentError with the reason."""
    if delivery.fields is None:
        raise PermanentError("unknown shape: the entry has no fields (deleted from the stream)")
    fields = _decode_all(delivery.fields)
    if "order_id" not in fields and "amount" not in fields and "type" not in fields and "event_id" not in fields:
        raise PermanentError("unknown shape: no order fields in " + ", ".join(sorted(fields))[:80])
    kind = fields.get("type", ORDER_PAID)
    if kind not in KNOWN_TYPES:
        raise PermanentError(f"unknown type {kind[:40]!r}")
    missing = [name for name in REQUIRED if not fields.get(name, "").strip()]
    if missing:
        raise PermanentError("missing " + " and ".join(missing))
    if max(map(len, fields.values())) > MAX_FIELD_BYTES:
        too_long = next(name for name, value in fields.items() if len(value) > MAX_FIELD_BYTES)
        raise PermanentError(f"unknown shape: field {too_long!r} is longer than {MAX_FIELD_BYTES}")
    event_id = fields.get("event_id") or None
    return OrderEvent(
        msg_id=delivery.msg_id,
        order_id=fields["order_id"].strip(),
        amount=parse_amount(fields["amount"]),
        event_id=event_id,
        type=kind,
        dedupe_key=dedupe_key(stream, delivery.msg_id, event_id),
    )
