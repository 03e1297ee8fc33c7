"""labs.exercises.nb05 on real Redis: BLOCK against the socket timeout, the PEL at a crash, the marker's TTL."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, prepared, says, solved, verdict

from labs.experiments.read_loop import fresh_group

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url)


def test_block_edge_passes_on_both_sides_and_ignores_the_boundary(ns: dict[str, Any]) -> None:
    prepared("05.1", ns)
    assert "`edge_results` пока не определена" in verdict("05.1", ns).message
    assert "Граница — сам таймаут сокета" in passes("05.1", {**ns, "edge_results": {300: "ok", 700: "TimeoutError"}})
    passes("05.1", {**ns, "edge_results": {300: "ok", 520: "ok", 700: "TimeoutError"}})  # too close to call
    says("05.1", {**ns, "edge_results": {300: "TimeoutError", 700: "TimeoutError"}}, "не тот исход")
    says("05.1", {**ns, "edge_results": {300: "ok", 400: "ok"}}, "Нужны оба случая")
    says("05.1", {**ns, "edge_results": {"300": "ok", 700: "TimeoutError"}}, "Ключи `edge_results`")
    ns["r"].delete(ns["edge_stream"])
    says("05.1", {**ns, "edge_results": {300: "ok", 700: "TimeoutError"}}, 'Стрима `P + "ex:edge"` нет')


def held(ns: dict[str, Any], after: int, pending: int) -> None:
    """A stream whose group holds ``pending`` entries, as a crashed run would leave it."""
    stream = f"{ns['P']}ex:held:{after}"
    fresh_group(ns["r"], stream, max(pending, 1))
    if pending:
        ns["r"].xreadgroup("billing", "consumer", {stream: ">"}, count=pending)


def test_held_at_crash_compares_the_figures_with_the_pel(ns: dict[str, Any]) -> None:
    assert "в PEL 63 записи" in passes("05.2", solved("05.2", ns))
    says("05.2", {**ns, "held_64": 64}, "`held_64` не совпадает с `XPENDING`")
    held(ns, 65, 64)  # a crash after a whole second batch was read and none of it done
    says("05.2", {**ns, "held_65": 64}, "проверьте `count=64`")
    ns["r"].delete(f"{ns['P']}ex:held:65")  # both runs on the first run's stream: the second one is missing
    says("05.2", {**ns, "held_64": 0, "held_65": 63}, "второй, похоже, шёл на стриме первого")


def test_ttl_needs_both_outcomes_and_each_on_its_own_stream(ns: dict[str, Any]) -> None:
    prepared("05.3", ns)
    right = {100: 2, 600: 1}
    for ttl in (100, 600, 310, 50):
        fresh_group(ns["r"], f"{ns['P']}ex:ttl:{ttl}", 1)
    assert "TTL метки должен быть не меньше" in passes("05.3", {**ns, "effects_by_ttl": right})
    passes("05.3", {**ns, "effects_by_ttl": {**right, 310: 2}})  # at the boundary: either way
    says("05.3", {**ns, "effects_by_ttl": {100: 1, 600: 1}}, "Нужны оба исхода")
    says("05.3", {**ns, "effects_by_ttl": {50: 2, 100: 1, 600: 1}}, "TTL 100 мс дал 1")
    says("05.3", {**ns, "effects_by_ttl": {100: 2, 700: 1}}, 'Стрима `P + "ex:ttl:700"` нет')
    says("05.3", {**ns, "effects_by_ttl": {100: 3, 600: 1}}, "число эффектов")
