"""labs.exercises.nb02 on real Redis: the notebook's own preparing cells, then right and wrong solutions."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, prepared, says, solved, verdict

from labs.experiments.claiming import ClaimRun

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url)


def test_two_failing_consumers_pass_with_owners_read_before_the_claim(ns: dict[str, Any]) -> None:
    assert "`two_journal` пока не определена" in verdict("02.1", prepared("02.1", ns)).message
    message = passes("02.1", solved("02.1", ns))
    assert "billing-1, billing-2" in message


@pytest.mark.parametrize(
    ("mistake", "fragment"),
    [
        ("owners after the claim", "владелец — сам `rescuer`"),
        ("not acked", "В PEL группы ещё"),
        ("one consumer only", "В PEL группы ещё"),
        ("a wrong owner", "не тот владелец"),
        ("not pairs", "пара (ID, консьюмер)"),
    ],
)
def test_two_failing_consumers_name_each_mistake(mistake: str, fragment: str, ns: dict[str, Any]) -> None:
    prepared("02.1", ns)
    client, stream = ns["r"], ns["two_stream"]
    failed = client.hgetall(ns["two_failed"])
    only = {k: v for k, v in failed.items() if v == "billing-2"} if mistake == "one consumer only" else failed
    _, claimed, _ = client.xautoclaim(stream, "billing", "rescuer", min_idle_time=100, count=100)
    ids = [m for m, _ in claimed if m in only]
    if mistake != "not acked":
        client.xack(stream, "billing", *ids)
    owners = {m: failed[m] for m in ids}
    if mistake == "owners after the claim":
        owners = dict.fromkeys(ids, "rescuer")
    if mistake == "a wrong owner":
        owners[ids[0]] = "billing-2" if owners[ids[0]] == "billing-1" else "billing-1"
    ns["two_journal"] = list(ids) if mistake == "not pairs" else list(owners.items())
    says("02.1", ns, fragment)


def _batch(ns: dict[str, Any], entries: int, duplicates: int, held_max_ms: float = 300.0) -> ClaimRun:
    stream = f"{ns['P']}ex:batch:{entries}"
    ns["r"].delete(stream)
    for i in range(entries):
        ns["r"].xadd(stream, {"i": i})
    return ClaimRun(500, entries, entries, entries + duplicates, duplicates, duplicates, 0, 50, 51, held_max_ms, 1.0)


def test_count_and_min_idle_judges_the_runs_records_and_the_forecast(ns: dict[str, Any]) -> None:
    right = {"batch_20": _batch(ns, 20, 10, 1050), "batch_5": _batch(ns, 5, 0), "twice_20_predicted": 10}
    assert "`batch_20`, `batch_5`, `twice_20_predicted` пока не определены" in verdict("02.2", ns).message
    assert "Из 20 дважды обработаны 10" in passes("02.2", {**ns, **right})
    says("02.2", {**ns, **right, "twice_20_predicted": 2}, "Прогноз далёк от замера")
    slow_20 = _batch(ns, 20, 14, 1400)  # a loaded machine: handlings of 65 ms, more entries outlive min idle
    passes("02.2", {**ns, **right, "batch_20": slow_20})  # the forecast from exact 50 ms handlings still counts
    says("02.2", {**ns, **right, "batch_5": _batch(ns, 5, 2)}, "В пачке из 5 есть дубли")
    slow = ClaimRun(500, 5, 5, 7, 2, 2, 0, 50, 51, 600, 1.0)  # a loaded machine: the batch outlived min idle
    passes("02.2", {**ns, **right, "batch_5": slow})
    says("02.2", {**ns, **right, "batch_20": right["batch_5"]}, "`batch_20`: нужен прогон")
    says("02.2", {**ns, **right, "batch_20": 10}, "результатом `claiming.double_processing_run")
    ns["r"].delete(f"{ns['P']}ex:batch:20")
    says("02.2", {**ns, **right}, 'Стрима `P + "ex:batch:20"` нет')


def test_where_stuck_passes_on_xpending_and_explains_each_wrong_answer(ns: dict[str, Any]) -> None:
    prepared("02.3", ns)
    client, stream = ns["r"], ns["stuck_stream"]
    assert "пока не определены" in verdict("02.3", ns).message  # the blank
    summary = client.xpending(stream, "billing")
    right = {c["name"]: c["pending"] for c in summary["consumers"]}
    entries = client.xpending_range(stream, "billing", min="-", max="+", count=100)
    oldest = max(entries, key=lambda e: e["time_since_delivered"])["consumer"]
    passes("02.3", {**ns, "pending_by_consumer": right, "oldest_holder": oldest})
    read_counts = {"billing-2": 2, "billing-1": 4}  # what was read, not what is pending
    says("02.3", {**ns, "pending_by_consumer": read_counts, "oldest_holder": oldest}, "числа не совпадают с PEL")
    says("02.3", {**ns, "pending_by_consumer": {"billing-2": 2}, "oldest_holder": oldest}, "не те консьюмеры")
    other = next(name for name in right if name != oldest)
    says("02.3", {**ns, "pending_by_consumer": right, "oldest_holder": other}, "`oldest_holder` держит не самую давнюю")
    says("02.3", {**ns, "pending_by_consumer": [1], "oldest_holder": oldest}, "словарём")


def claim(ns: dict[str, Any], *, ack: bool = True) -> None:
    client, stream = ns["r"], ns["rescue_stream"]
    _, claimed, _ = client.xautoclaim(stream, "billing", "rescuer", min_idle_time=100)
    ns["rescued"] = [msg_id for msg_id, _ in claimed]
    if ack:
        client.xack(stream, "billing", *ns["rescued"])


def test_rescue_passes_when_claimed_and_acked(ns: dict[str, Any]) -> None:
    prepared("02.4", ns)
    assert "`rescued` пока не определена" in verdict("02.4", ns).message
    claim(ns)
    passes("02.4", ns)


@pytest.mark.parametrize(
    ("mistake", "fragment"),
    [
        ("not acked", "надо подтвердить XACK"),
        ("acked without claiming", "нет консьюмера `rescuer`"),
        ("deleted", "стало меньше записей"),
        ("wrong ids", "не те ID"),
        ("not a list", "должен быть списком"),
        ("stream gone", 'Стрима `P + "ex:rescue"` нет'),
    ],
)
def test_rescue_names_what_is_wrong_without_the_answer(mistake: str, fragment: str, ns: dict[str, Any]) -> None:
    prepared("02.4", ns)
    client, stream = ns["r"], ns["rescue_stream"]
    ids = [msg_id for msg_id, _ in client.xrange(stream)]
    if mistake == "not acked":
        claim(ns, ack=False)
    elif mistake == "acked without claiming":
        client.xack(stream, "billing", *ids)
        ns["rescued"] = ids[:3]
    elif mistake == "deleted":
        claim(ns)
        client.xdel(stream, *ns["rescued"])
    elif mistake == "wrong ids":
        claim(ns)
        ns["rescued"] = ids[3:]
    elif mistake == "not a list":
        claim(ns)
        ns["rescued"] = "3"
    elif mistake == "stream gone":
        client.delete(stream)
        ns["rescued"] = []
    result = verdict("02.4", ns)
    assert not result.passed and fragment in result.message, result.message
    assert not any(str(i) in result.message for i in ids)  # no ID to copy
