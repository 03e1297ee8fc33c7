"""Validation of order events: what is permanent (DLQ at once) and with which reason."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest

from solutions.messages import Delivery, OrderEvent, PermanentError, dedupe_key, flat_fields, parse_order

PRODUCER = {b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"9.99", b"event_id": b"e-1"}
FIVE_MORE = {b"seq": b"17", b"trace_id": b"4bf92f3577b34da6a3ce929d0e0e4736", b"source": b"web",
             b"currency": b"EUR", b"produced_at_ms": b"1700000000000"}


def delivery(fields: dict[bytes, bytes] | None, msg_id: str = "1700000000000-0") -> Delivery:
    return Delivery(msg_id, None if fields is None else flat_fields(fields))


def test_valid_event_is_parsed() -> None:
    event = parse_order(
        "orders",
        delivery({b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"12.50", b"event_id": b"e-1"}),
    )
    assert (event.order_id, event.amount, event.event_id, event.dedupe_key) == ("o-1", Decimal("12.50"), "e-1", "e-1")


def test_dedupe_key_falls_back_to_stream_and_id() -> None:
    event = parse_order("orders", delivery({b"order_id": b"o-1", b"amount": b"1"}, "5-1"))
    assert event.dedupe_key == "orders:5-1" == dedupe_key("orders", "5-1", None)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({b"type": b"order.paid", b"amount": b"1.00"}, "missing order_id"),
        ({b"type": b"order.paid", b"order_id": b"o-1"}, "missing amount"),
        ({b"order_id": b"o-1", b"amount": b"ten"}, "not a decimal"),
        ({b"order_id": b"o-1", b"amount": b"-5"}, "not positive"),
        ({b"order_id": b"o-1", b"amount": b"0"}, "not positive"),
        ({b"order_id": b"o-1", b"amount": b"NaN"}, "not a finite decimal"),
        ({b"order_id": b"\xff\xfe", b"amount": b"1"}, "undecodable"),
        ({b"type": b"order.refunded", b"order_id": b"o-1", b"amount": b"1"}, "unknown type"),
        ({b"payload": b"{}"}, "unknown shape"),
        (None, "unknown shape"),
    ],
)
def test_bad_input_is_permanent_with_a_reason(fields: dict[bytes, bytes] | None, reason: str) -> None:
    with pytest.raises(PermanentError, match=reason):
        parse_order("orders", delivery(fields))


def test_non_ascii_values_are_decoded_and_their_length_counted_in_characters() -> None:
    name = "Jos\u00e9-" + "\u00e9" * 200  # 206 characters, 407 bytes: within the 256-character limit
    fields = {b"order_id": name.encode(), b"amount": b" 7.25 ", b"note": "\u00e9".encode()}
    event = parse_order("orders", delivery(fields))
    assert (event.order_id, event.amount, event.event_id, event.type) == (name, Decimal("7.25"), None, "order.paid")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({b"note": b"\xff"}, "undecodable bytes in field b'note'"),
        ({b"\xfe": b"x"}, "undecodable bytes in field"),
        ({b"note": b"x" * 257}, "field 'note' is longer than 256"),
        ({b"note": "\u00e9".encode() * 257}, "field 'note' is longer than 256"),
        ({b"event_id": b"e" * 257}, "field 'event_id' is longer than 256"),
    ],
)
def test_any_field_can_reject_an_otherwise_valid_event(extra: dict[bytes, bytes], reason: str) -> None:
    """Only four fields are used, but a bad one among the others still sends the message to the DLQ."""
    with pytest.raises(PermanentError, match=reason):
        parse_order("orders", delivery({b"order_id": b"o-1", b"amount": b"1.00", **extra}))


@pytest.mark.parametrize(
    "fields",
    [
        {b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"12.50", b"event_id": b"e-1"},
        {b"order_id": b" o-1 ", b"amount": b" 7.25 "},
        {b"order_id": b"o-1", b"amount": b"1_000"},
        {b"order_id": b"o-1", b"amount": b"+5"},
        {b"order_id": b"o-1", b"amount": b"1E+2", b"event_id": b""},
        {b"order_id": b"o-1", b"amount": b"Infinity"},
        {b"order_id": b"o-1", b"amount": b"0.00"},
        {b"order_id": b"  ", b"amount": b"1"},
        {b"type": b"order.paid", b"order_id": "\u00e9".encode(), b"amount": b"1"},
        {b"type": b"ORDER.PAID", b"order_id": b"o-1", b"amount": b"1"},
        {b"order_id": b"o-1", b"amount": b"1", b"note": b"x"},
        {b"order_id": b"o-" + b"1" * 250, b"amount": b"1.00", b"event_id": b"e-1"},
        # the producer's order, with and without produced_at_ms: the shapes the fast path knows
        {b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"9.99", b"event_id": b"e-1", b"produced_at_ms": b"1"},
        {b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"9.99", b"event_id": b"e-1",
         b"produced_at_ms": b"\xff"},
        {b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"9.99", b"event_id": b"",
         b"produced_at_ms": b"9" * 250},
        {b"type": b"order.paid", b"order_id": b" o-1", b"amount": b"-1", b"event_id": b"e-1"},
        {b"type": b"order.paid", b"order_id": b"o-1", b"amount": b"sNaN", b"event_id": b"e-1"},
        {b"type": b"order.paid", b"order_id": b"", b"amount": b"1", b"event_id": b"e-1"},
        {b"type": b"order.paid", b"order_id": b"\xe9", b"amount": b"1", b"event_id": b"e-1"},
        {b"type": b"order.pai", b"order_id": b"o-1", b"amount": b"1", b"event_id": b"e-1"},
        # the bench's shapes (labs/bench/shapes.py): extra fields, another order, non-ASCII
        {**PRODUCER, b"seq": b"17"},
        {**PRODUCER, **FIVE_MORE},
        dict(reversed(PRODUCER.items())),
        {b"amount": b"9.99", b"event_id": b"e-1", b"type": b"order.paid", b"order_id": b"o-1", b"seq": b"1"},
        {**PRODUCER, b"order_id": "заказ-17".encode()},
        {**PRODUCER, b"order_id": "é".encode() * 128},  # 256 bytes: the limit, in one field
        {**PRODUCER, b"order_id": "é".encode() * 129},  # 258 bytes, 129 characters: accepted too
        {**PRODUCER, **FIVE_MORE, b"trace": b"t" * 200},  # longer than 256 in all, each field short
        {**PRODUCER, b"note": b"x" * 257},
        {**PRODUCER, b"note": "é".encode() * 200},  # 400 bytes, 200 characters
        {**PRODUCER, b"note": b"\xff"},
        {**PRODUCER, b"\xfe": b"x"},
        {**PRODUCER, b"type": b"order.refunded", b"seq": b"1"},
        {**PRODUCER, b"amount": b"0.5", b"seq": b"1"},
        {**PRODUCER, b"amount": b"1 2", b"seq": b"1"},
        {**PRODUCER, b"order_id": b" ", b"seq": b"1"},
        {b"order_id": b"o-1", b"amount": b"1", b"event_id": b"e-1", b"seq": b"1"},  # no type: order.paid
        {b"seq": b"1", b"trace": b"x"},
    ],
)
def test_the_fast_path_agrees_with_the_slow_path(fields: dict[bytes, bytes]) -> None:
    """parse_order's shortcut only accepts; whatever it decides, the slow path (every field
    decoded) decides the same, event or reason."""
    assert _fast(flat_fields(fields)) == _slow(flat_fields(fields))


@pytest.mark.parametrize(
    "fields",
    [
        [*flat_fields(PRODUCER), b"amount", b"2.50"],  # a name twice: the last pair wins
        [*flat_fields(PRODUCER), b"order_id", b""],
        [b"order_id", b"o-1", b"amount", b"1", b"note", b"\xc3", b"\xa9", b"x"],  # é split over two fields
        [*flat_fields(PRODUCER), b"dangling"],  # an odd number of items: the last name has no value
        [b"order_id", b"\xc3", b"\xa9mount", b"1"],
    ],
)
def test_the_fast_path_agrees_with_the_slow_path_on_raw_replies(fields: list[bytes]) -> None:
    assert _fast(fields) == _slow(fields)


def _outcome(parse: Callable[[], OrderEvent]) -> OrderEvent | str:
    try:
        return parse()
    except PermanentError as exc:
        return f"PermanentError: {exc}"


def _fast(fields: list[bytes]) -> OrderEvent | str:
    return _outcome(lambda: parse_order("orders", Delivery("9-9", fields)))


def _slow(fields: list[bytes]) -> OrderEvent | str:
    from solutions.messages import _decode_all, _parse_decoded

    return _outcome(lambda: _parse_decoded("orders", "9-9", _decode_all(fields)))


def test_extra_fields_and_another_order_make_the_same_event() -> None:
    """A field the contract allows never changes the event (nor sends it down another verdict)."""
    expected = parse_order("orders", delivery(PRODUCER))
    shapes = [{**PRODUCER, b"seq": b"1"}, {**PRODUCER, **FIVE_MORE}, dict(reversed(PRODUCER.items())),
              {**PRODUCER, b"produced_at_ms": b"1700000000000"}]
    assert all(parse_order("orders", delivery(shape)) == expected for shape in shapes)
    assert (expected.order_id, expected.amount, expected.dedupe_key) == ("o-1", Decimal("9.99"), "e-1")


def test_fields_stay_as_redis_sent_them() -> None:
    """An entry may carry a field twice (XADD allows it): the parse reads the last value, as a
    dict would, and the DLQ entry keeps the original list."""
    from solutions.dlq import dead_letter_fields

    fields = [b"order_id", b"o-1", b"amount", b"ten", b"amount", b"2.50"]
    assert parse_order("orders", Delivery("1-1", fields)).amount == Decimal("2.50")
    assert Delivery("1-1", fields).text("amount") == "2.50" and Delivery("1-1", None).text("amount") is None
    assert dead_letter_fields(Delivery("1-1", fields, 3), "bad")[:4] == [b"order_id", b"o-1", b"amount", b"2.50"]
