"""How a read batch becomes runs (solutions/runs.py): lanes in stream order, echoes, ids in a log line."""

from __future__ import annotations

from decimal import Decimal

from solutions.messages import Delivery, OrderEvent
from solutions.runs import ALL_LANES, ids_text, split_echoes, split_runs


def _delivery(msg_id: str, order_id: bytes | None) -> Delivery:
    fields = [b"amount", b"1.00"] + ([b"order_id", order_id] if order_id is not None else [])
    return Delivery(msg_id, fields)


def test_a_batch_splits_into_runs_by_lane_in_stream_order() -> None:
    batch = [_delivery("1-0", b"a"), _delivery("2-0", b"b"), _delivery("3-0", None), _delivery("4-0", b"a"),
             _delivery("5-0", b"\xff")]  # no order_id, an undecodable one: each a run on no lane
    runs = [(lanes, [d.msg_id for d in run]) for lanes, run in split_runs(batch, instant=False, order_key="order_id")]
    assert runs == [([], ["3-0"]), ([], ["5-0"]), (["a"], ["1-0", "4-0"]), (["b"], ["2-0"])]


def test_an_instant_handler_takes_a_batch_as_one_run_and_no_key_means_no_lanes() -> None:
    batch = [_delivery("1-0", b"a"), _delivery("2-0", b"a")]
    assert [(lanes, len(run)) for lanes, run in split_runs(batch, instant=True, order_key="order_id")] == [
        ([ALL_LANES], 2)
    ]
    assert [lanes for lanes, _ in split_runs(batch, instant=False, order_key="")] == [[], []]
    assert list(split_runs([], instant=True, order_key="order_id")) == []


def _event(msg_id: str, event_id: str) -> OrderEvent:
    return OrderEvent(msg_id, "order-1", Decimal("1.00"), event_id, "order.paid", event_id)


def test_a_second_copy_of_an_event_in_a_run_waits_for_the_first() -> None:
    one, copy, other = _delivery("1-0", b"a"), _delivery("2-0", b"a"), _delivery("3-0", b"b")
    todo = [(one, _event("1-0", "e-1")), (copy, _event("2-0", "e-1")), (other, _event("3-0", "e-2"))]
    first, echoes = split_echoes(todo)
    assert [d.msg_id for d, _ in first] == ["1-0", "3-0"]
    assert echoes == [(copy, "e-1")]
    assert split_echoes(first) == (first, [])


def test_ids_in_a_log_line_are_the_first_ten_and_a_count() -> None:
    assert ids_text(["1-0", "2-0"]) == "1-0,2-0"
    assert ids_text([f"{i}-0" for i in range(12)]) == ",".join(f"{i}-0" for i in range(10)) + " (+2 more)"
