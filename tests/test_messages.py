"""Validation of order events: what is permanent (DLQ at once) and with which reason."""

from __future__ import annotations

from decimal import Decimal

import pytest

from solutions.messages import Delivery, PermanentError, dedupe_key, parse_order


def delivery(fields: dict[bytes, bytes] | None, msg_id: str = "1700000000000-0") -> Delivery:
    return Delivery(msg_id, fields)


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
