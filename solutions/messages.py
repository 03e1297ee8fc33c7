"""Order events: what a message on ``orders`` must look like, and why one is rejected.

A message that can never succeed (a missing field, an amount that is not a positive
decimal, bytes that do not decode, an unknown type or shape) raises :class:`PermanentError`
with a short reason; the worker sends it to the DLQ at once instead of retrying it.

A stream entry's fields are kept as Redis sends them: a flat list ``[name, value, name,
value ...]`` in the order the producer wrote them (:data:`RawFields`). Turning each entry into
a str dict costs more than everything else the parse does, so the parse picks the fields it
needs from the raw pairs and decodes only those (see :func:`parse_order`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

ORDER_PAID = "order.paid"
KNOWN_TYPES = (ORDER_PAID,)
REQUIRED = ("order_id", "amount")
MAX_FIELD_BYTES = 256
# billing-producer's field order (DESIGN.md): unpacked at once; any other order or set of
# fields is looked up by name (see parse_order), just as fast.
PRODUCER_FIELDS = [b"type", b"order_id", b"amount", b"event_id"]
_TYPE, _ORDER_ID, _AMOUNT, _EVENT_ID = PRODUCER_FIELDS
MAX_LAYOUTS = 256  # layouts of field names remembered by the fast path (a producer has one or two)
_LAYOUTS: dict[tuple[bytes, ...], tuple[int, int, int, int]] = {}
_ONE_TO_NINE = frozenset(b"123456789")  # an amount's first byte, as an int
_ORDER_PAID = ORDER_PAID.encode()
_ZERO = Decimal(0)
RawFields = Sequence[bytes]  # name, value, name, value ...: an entry's fields as Redis sends them


def flat_fields(fields: Mapping[bytes, bytes]) -> list[bytes]:
    """A mapping of fields (redis-py's parsed replies hold them so) as the flat list Redis sends."""
    return [item for pair in fields.items() for item in pair]


def field_map(fields: RawFields) -> dict[bytes, bytes]:
    """The flat list as a dict (a field given twice keeps its last value, as redis-py does)."""
    it = iter(fields)
    return dict(zip(it, it, strict=False))


class PermanentError(Exception):
    """The message can never be processed; the reason goes into the DLQ entry's ``error``."""


class TransientError(Exception):
    """The attempt failed but another delivery may succeed: the message is not acked."""


@dataclass(slots=True)
class Delivery:
    """One message as the group delivered it, with the delivery count Redis keeps for it.

    Slotted and not frozen: one is built per message on the hot path, and a frozen
    dataclass pays for ``object.__setattr__`` on every field. Treat it as read-only.
    """

    msg_id: str
    fields: RawFields | None  # None: the entry was deleted from the stream while pending
    deliveries: int = 1
    source: str = "new"

    @property
    def id_ms(self) -> int:
        """The time part of the message id: when XADD put it in the stream (ms since epoch)."""
        return int(self.msg_id.split("-", 1)[0])

    def text(self, name: str) -> str | None:
        """A field decoded as UTF-8, or None when it is missing or undecodable."""
        fields, key = self.fields, name.encode()
        if not fields:
            return None
        # The last pair of that name wins, as in field_map; a dangling name (odd length) is no pair.
        last_name = len(fields) - 2 - len(fields) % 2
        raw = next((fields[i + 1] for i in range(last_name, -1, -2) if fields[i] == key), None)
        if raw is None:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return None


@dataclass(slots=True)
class OrderEvent:
    """A validated ``order.paid`` event (slotted for the hot path; treat it as read-only)."""

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
    pairs = field_map(fields)
    try:
        return {name.decode(): value.decode() for name, value in pairs.items()}
    except UnicodeDecodeError:
        pass
    for name, value in pairs.items():  # the slow path only to name the bad field
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
    """Validate a delivery as an ``order.paid`` event; raise PermanentError with the reason.

    The fast path only ever accepts, and it does so for any set of fields in any order: the
    producer's own layout is unpacked at once; any other layout of names is looked up (a
    tuple of the names, one dict lookup) in the positions learnt from the first message with
    those names (:func:`_positions`: the last pair of a name wins, as in :func:`field_map`),
    so the four values are picked without building a dict per message and the other fields
    stay unread. It accepts when every value is short enough in bytes (so in characters too), every name and
    value decodes (one ``isascii``, else one ``decode``, over all of them joined by newlines),
    the type is ``order.paid``, and there is an order id and an amount that starts with a
    digit 1-9 and is a decimal (so it is finite and positive). Anything else takes the slow
    path, which decodes every field and gives every verdict, so each rejection (and its
    reason) is decided in one place. A field the contract allows (``produced_at_ms``, a
    producer's ``seq`` or trace id) costs one more name in a tuple, not the slow path.
    """
    fields = delivery.fields
    if fields is None:
        raise PermanentError("unknown shape: the entry has no fields (deleted from the stream)")
    kind: bytes | None
    order_id: bytes | None
    amount: bytes | None
    event_id: bytes | None
    if len(fields) == 8 and fields[0] == _TYPE and fields[2] == _ORDER_ID and fields[4] == _AMOUNT \
            and fields[6] == _EVENT_ID:  # the producer's own shape, unpacked in one step
        _, kind, _, order_id, _, amount, _, event_id = fields
    elif len(fields) % 2:
        return _parse_decoded(stream, delivery.msg_id, _decode_all(fields))
    else:  # where this layout of names keeps the four (learnt once per layout, see _positions)
        where = _LAYOUTS.get(names := tuple(fields[0::2])) or _positions(names)
        if where is None:
            return _parse_decoded(stream, delivery.msg_id, _decode_all(fields))
        t, o, a, e = where
        kind, order_id, amount, event_id = fields[t], fields[o], fields[a], fields[e] if e else None
    if kind == _ORDER_PAID and order_id and amount and amount[0] in _ONE_TO_NINE:
        # Every name and value at once, an ASCII byte between each two: UTF-8 is self-synchronising,
        # so the whole decodes exactly when each of them does (a sequence cut at the end of one
        # field, or a continuation byte opening the next, meets the newline and fails).
        joined = b"\n".join(fields)
        if (len(joined) <= MAX_FIELD_BYTES or max(map(len, fields[1::2])) <= MAX_FIELD_BYTES) and (
            joined.isascii() or _is_utf8(joined)
        ):
            try:
                oid, value = order_id.decode().strip(), Decimal(amount.decode())
            except InvalidOperation:
                pass
            else:
                if oid:
                    msg_id = delivery.msg_id
                    eid = event_id.decode() if event_id else None
                    key = eid or f"{stream}:{msg_id}"  # dedupe_key(stream, msg_id, eid), without the call
                    return OrderEvent(msg_id, oid, value, eid, ORDER_PAID, key)
    return _parse_decoded(stream, delivery.msg_id, _decode_all(fields))


def _positions(names: tuple[bytes, ...]) -> tuple[int, int, int, int] | None:
    """Where the values of ``type``, ``order_id``, ``amount`` and ``event_id`` sit in a flat
    reply whose names are ``names`` (the last pair of a name wins; ``event_id`` 0 when it is
    missing), or None when one of the first three is missing (the slow path's to judge).
    Remembered for the next message with the same names, up to :data:`MAX_LAYOUTS` layouts."""
    last = {name: 2 * i + 1 for i, name in enumerate(names)}
    t, o, a = last.get(_TYPE), last.get(_ORDER_ID), last.get(_AMOUNT)
    if t is None or o is None or a is None:
        return None
    where = (t, o, a, last.get(_EVENT_ID, 0))
    if len(_LAYOUTS) < MAX_LAYOUTS:
        _LAYOUTS[names] = where
    return where


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _parse_decoded(stream: str, msg_id: str, fields: dict[str, str]) -> OrderEvent:
    """The slow path: every field decoded, so a rejection can name any of them."""
    if "order_id" not in fields and "amount" not in fields and "type" not in fields and "event_id" not in fields:
        raise PermanentError("unknown shape: no order fields in " + ", ".join(sorted(fields))[:80])
    kind = fields.get("type", ORDER_PAID)
    known_and_complete = kind in KNOWN_TYPES and all(fields.get(name, "").strip() for name in REQUIRED)
    if known_and_complete and max(map(len, fields.values())) > MAX_FIELD_BYTES:
        too_long = next(name for name, value in fields.items() if len(value) > MAX_FIELD_BYTES)
        raise PermanentError(f"unknown shape: field {too_long!r} is longer than {MAX_FIELD_BYTES}")
    return _order(stream, msg_id, kind, fields.get("order_id", ""), fields.get("amount", ""), fields.get("event_id"))


def _order(stream: str, msg_id: str, kind: str, order_id: str, amount: str, event_id: str | None) -> OrderEvent:
    """The checks in order (type, required fields, amount) and the event."""
    if kind not in KNOWN_TYPES:
        raise PermanentError(f"unknown type {kind[:40]!r}")
    order_id = order_id.strip()
    if not order_id or not amount.strip():
        raise PermanentError(
            "missing "
            + " and ".join(name for name, value in (("order_id", order_id), ("amount", amount)) if not value.strip())
        )
    event_id = event_id or None
    return OrderEvent(msg_id, order_id, parse_amount(amount), event_id, kind, dedupe_key(stream, msg_id, event_id))
