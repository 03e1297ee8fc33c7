"""labs.exercises.nb01 on real Redis: right and wrong results for the soft limit, eviction and node size checks.

The soft-limit and eviction runs themselves take seconds; the student edition's test runs them
once (tests/test_edition.py). Here their results are put in place by hand, and the checks read
the real server: its settings, its clients, the streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, says, solved, verdict

from labs.experiments.eviction import EvictionResult

pytestmark = pytest.mark.timeout(30)

OOM = "OutOfMemoryError: command not allowed when used memory > 'maxmemory'."


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url)


@pytest.fixture
def restore_config(redis_client: redis.Redis) -> Iterator[None]:
    """Tests that leave a server setting changed on purpose put it back afterwards."""
    saved = {
        name: redis_client.config_get(name)[name] for name in ("client-output-buffer-limit", "stream-node-max-entries")
    }
    yield
    for name, value in saved.items():
        redis_client.config_set(name, value)


def soft(ns: dict[str, Any], over_s: Any, cut_s: Any) -> dict[str, Any]:
    original = ns["r"].config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    name = ns["P"].replace(":", "-") + "soft-subscriber"
    return {**ns, "soft_original": original, "soft_name": name, "soft_over_s": over_s, "soft_cut_s": cut_s}


def test_soft_limit_passes_on_a_gap_of_about_the_soft_seconds(ns: dict[str, Any]) -> None:
    assert "пока не определены" in verdict("01.1", {**ns, "soft_original": "", "soft_name": "x"}).message
    assert "разрыв — ещё через 1.40 с" in passes("01.1", soft(ns, 0.6, 2.0))


@pytest.mark.parametrize(
    ("over_s", "cut_s", "fragment"),
    [
        (0.5, 0.55, "так работает жёсткий предел"),
        (0.5, 6.0, "прошло слишком много: мягкий предел здесь — 1 с. Проверьте класс"),
        (None, 2.0, "`soft_over_s` пуст"),
        (2.0, 1.0, "раньше `soft_over_s`"),
        (0.5, "2", "должна быть числом"),
    ],
)
def test_soft_limit_explains_a_wrong_gap(over_s: Any, cut_s: Any, fragment: str, ns: dict[str, Any]) -> None:
    says("01.1", soft(ns, over_s, cut_s), fragment)


@pytest.mark.usefixtures("restore_config")
def test_soft_limit_wants_the_setting_back_and_the_subscriber_gone(ns: dict[str, Any], redis_url: str) -> None:
    right = soft(ns, 0.6, 2.0)
    subscriber = redis.Redis.from_url(redis_url, client_name=right["soft_name"]).pubsub()
    subscriber.subscribe("x")
    assert subscriber.get_message(timeout=1.0)
    try:
        says("01.1", right, "Подписчик всё ещё подключён")
    finally:
        subscriber.close()
    ns["r"].config_set("client-output-buffer-limit", "pubsub 0 262144 1")
    says("01.1", right, "`client-output-buffer-limit` не возвращён")


def evicted(policy: str, *, evicted_keys: int = 0, refused: bool = True) -> EvictionResult:
    return EvictionResult(
        policy=policy, maxmemory_bytes=2_000_000, pending_before=5, cache_keys_written=600,
        evicted_keys=evicted_keys, cache_error=OOM if refused else "", stream_exists=refused,
        pending_after=5 if refused else None, consumer_error="" if refused else "ResponseError: NOGROUP",
        producer_accepted=3, producer_error=OOM if refused else "", groups_after_xadd=1 if refused else 0,
    )  # fmt: skip


def test_no_candidates_is_judged_by_the_runs_own_record(ns: dict[str, Any]) -> None:
    def answer(run: Any, like: str = "noeviction") -> dict[str, Any]:
        return {**ns, "no_candidates": run, "no_candidates_like": like}

    run = evicted("volatile-lru")
    assert "`volatile-lru` нет кандидатов" in passes("01.2", answer(run))
    says("01.2", answer(run, "allkeys-lru"), "Не похоже")
    says("01.2", answer(run, "lru"), "одно из имён")
    says("01.2", answer(evicted("volatile-lru", evicted_keys=40)), "у ключей кэша был TTL")
    says("01.2", answer(evicted("noeviction")), "политикой `volatile-lru`")
    says("01.2", answer("OOM"), "результатом `eviction.run_eviction")


@pytest.mark.usefixtures("restore_config")
def test_node_size_passes_with_the_reference_and_restored_setting(ns: dict[str, Any]) -> None:
    assert "пока не определены" in verdict("01.3", ns).message
    message = passes("01.3", solved("01.3", ns))
    assert "Превышение 55 при узлах по 100 и 5 при узлах по 10" in message
    says("01.3", {**ns, "excess_10": 4}, "`excess_10` не совпадает")
    ns["r"].config_set("stream-node-max-entries", 10)
    says("01.3", ns, "не вернулся к 100")


@pytest.mark.usefixtures("restore_config")
def test_node_size_sees_nodes_of_the_wrong_size_and_a_count_without_excess(ns: dict[str, Any]) -> None:
    client, prefix = ns["r"], ns["P"]

    def fill(stream: str, writes: int, node: int) -> int:
        client.config_set("stream-node-max-entries", node)
        pipe = client.pipeline(transaction=False)
        for i in range(writes):
            pipe.xadd(prefix + stream, {"i": i}, maxlen=1000, approximate=True)
        pipe.execute()
        client.config_set("stream-node-max-entries", 100)
        return client.xlen(prefix + stream) - 1000

    answers = {"excess_100": fill("ex:nodes:100", 2555, 100), "excess_10": fill("ex:nodes:10", 2555, 100)}
    says("01.3", {**ns, **answers}, "узлы не по 10 записей")
    client.delete(prefix + "ex:nodes:10")
    answers["excess_10"] = fill("ex:nodes:10", 2550, 10)
    says("01.3", {**ns, **answers}, "ровно 1000 или меньше")
    client.delete(prefix + "ex:nodes:100")
    says("01.3", {**ns, **answers}, 'Стрима `P + "ex:nodes:100"` нет')
