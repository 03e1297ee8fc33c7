"""labs.exercises.nb02 on real Redis: the notebook's own preparing cells, then right and wrong solutions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import nbformat
import pytest
import redis

from labs.exercises.edition import SOURCE_DIR
from labs.exercises.exercise import Verdict, evaluate
from labs.exercises.notebook import find

pytestmark = pytest.mark.timeout(30)

NOTEBOOK = SOURCE_DIR / "02_consumer_groups.ipynb"


def prepared(exercise_id: str, client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Run the exercise's preparing cell (from the notebook itself) in a fresh namespace."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("exercise") == exercise_id and "prepare" in c.id]
    ns: dict[str, Any] = {"r": client, "P": prefix, "time": time}
    exec(cell.source, ns)
    return ns


def verdict(exercise_id: str, ns: dict[str, Any], solve: Callable[[dict[str, Any]], None] | None = None) -> Verdict:
    if solve:
        solve(ns)
    return evaluate(find(exercise_id), ns)


def test_where_stuck_passes_on_xpending_and_explains_each_wrong_answer(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    ns = prepared("02.3", redis_client, key_prefix)
    stream = ns["stuck_stream"]
    assert "пока не определены" in verdict("02.3", dict(ns)).message  # the blank
    summary = redis_client.xpending(stream, "billing")
    right = {c["name"]: c["pending"] for c in summary["consumers"]}
    entries = redis_client.xpending_range(stream, "billing", min="-", max="+", count=100)
    oldest = max(entries, key=lambda e: e["time_since_delivered"])["consumer"]
    assert verdict("02.3", {**ns, "pending_by_consumer": right, "oldest_holder": oldest}).passed
    read_counts = {"billing-2": 2, "billing-1": 4}  # what was read, not what is pending
    assert "числа не совпадают с PEL" in verdict(
        "02.3", {**ns, "pending_by_consumer": read_counts, "oldest_holder": oldest}).message
    assert "не те консьюмеры" in verdict(
        "02.3", {**ns, "pending_by_consumer": {"billing-2": 2}, "oldest_holder": oldest}).message
    other = next(name for name in right if name != oldest)
    assert "`oldest_holder` держит не самую давнюю" in verdict(
        "02.3", {**ns, "pending_by_consumer": right, "oldest_holder": other}).message
    assert "словарём" in verdict("02.3", {**ns, "pending_by_consumer": [1], "oldest_holder": oldest}).message


def claim(ns: dict[str, Any], *, ack: bool = True) -> None:
    client, stream = ns["r"], ns["rescue_stream"]
    _, claimed, _ = client.xautoclaim(stream, "billing", "rescuer", min_idle_time=100)
    ns["rescued"] = [msg_id for msg_id, _ in claimed]
    if ack:
        client.xack(stream, "billing", *ns["rescued"])


def test_rescue_passes_when_claimed_and_acked(redis_client: redis.Redis, key_prefix: str) -> None:
    ns = prepared("02.4", redis_client, key_prefix)
    assert "`rescued` пока не определена" in verdict("02.4", ns).message
    good = verdict("02.4", ns, claim)
    assert good.passed, good.message


@pytest.mark.parametrize(
    ("mistake", "says"),
    [
        ("not acked", "надо подтвердить XACK"),
        ("acked without claiming", "нет консьюмера `rescuer`"),
        ("deleted", "стало меньше записей"),
        ("wrong ids", "не те ID"),
        ("not a list", "должен быть списком"),
        ("stream gone", "Стрима `P + \"ex:rescue\"` нет"),
    ],
)
def test_rescue_names_what_is_wrong_without_the_answer(
    mistake: str, says: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    ns = prepared("02.4", redis_client, key_prefix)
    stream = ns["rescue_stream"]
    ids = [msg_id for msg_id, _ in redis_client.xrange(stream)]
    if mistake == "not acked":
        claim(ns, ack=False)
    elif mistake == "acked without claiming":
        redis_client.xack(stream, "billing", *ids)
        ns["rescued"] = ids[:3]
    elif mistake == "deleted":
        claim(ns)
        redis_client.xdel(stream, *ns["rescued"])
    elif mistake == "wrong ids":
        claim(ns)
        ns["rescued"] = ids[3:]
    elif mistake == "not a list":
        claim(ns)
        ns["rescued"] = "3"
    elif mistake == "stream gone":
        redis_client.delete(stream)
        ns["rescued"] = []
    result = verdict("02.4", ns)
    assert not result.passed and says in result.message, result.message
    assert not any(str(i) in result.message for i in ids)  # no ID to copy
