"""labs.exercises.nb04 on real Redis: the lab's functions driven by the check, ack-first, a hurried rescuer."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, prepared, says, solved, verdict

from solutions import lab1

pytestmark = pytest.mark.timeout(60)

ACK_FIRST = """
def consume_once(client, stream, group, consumer, handle, *, block_ms=2000, count=10):
    reply = client.xreadgroup(group, consumer, {stream: ">"}, count=count, block=block_ms)
    done = 0
    for _name, messages in reply or []:
        for msg_id, fields in messages:
            client.xack(stream, group, msg_id)
            try:
                handle(msg_id, fields, consumer)
                done += 1
            except Exception:
                pass
    return done
"""
NO_BLOCK = """
def consume_once(client, stream, group, consumer, handle, *, block_ms=2000, count=10):
    reply = client.xreadgroup(group, consumer, {stream: ">"}, count=count)
    done = 0
    for _name, messages in reply or []:
        for msg_id, fields in messages:
            try:
                handle(msg_id, fields, consumer)
            except Exception:
                continue
            client.xack(stream, group, msg_id)
            done += 1
    return done
"""
NO_MIN_IDLE = """
def rescue_once(client, stream, group, rescuer, handle, *, min_idle_ms=3000, count=100, cursor="0-0"):
    return reference.rescue_once(client, stream, group, rescuer, handle, min_idle_ms=0, count=count, cursor=cursor)
"""


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str) -> dict[str, Any]:
    return namespace(redis_client, key_prefix, redis_url, lab1=lab1, always_ok=lambda *_: None)


def variant(tmp_path: Path, name: str, override: str) -> str:
    """A copy of the reference with one function replaced: the file path, as a student would give it."""
    path = tmp_path / f"{name}.py"
    head = "from solutions import lab1 as reference\nfrom solutions.lab1 import *  # noqa: F403\n"
    path.write_text(head + textwrap.dedent(override))
    return str(path)


def test_your_implementation_passes_for_the_reference(ns: dict[str, Any]) -> None:
    assert "`my_impl` пока не определена" in verdict("04.1", ns).message
    assert "прошла шаги 1–3" in passes("04.1", solved("04.1", ns))


@pytest.mark.parametrize(
    ("impl", "fragment"),
    [
        ("labs.lab1.starter", "`ensure_group` ещё не написана"),
        ("ack-first", "подтверждена до обработки"),
        ("no-block", "Пустое чтение вернулось сразу"),
        ("no-min-idle", "простаивает меньше min idle"),
        ("my_lab1.py", "Путь считается от каталога ноутбука"),
        ("labs.nothing_here", "не загрузилась"),
    ],
)
def test_your_implementation_names_the_function_and_the_step(
    impl: str, fragment: str, ns: dict[str, Any], tmp_path: Path
) -> None:
    overrides = {"ack-first": ACK_FIRST, "no-block": NO_BLOCK, "no-min-idle": NO_MIN_IDLE}
    spec = variant(tmp_path, impl.replace("-", "_"), overrides[impl]) if impl in overrides else impl
    says("04.1", {**ns, "my_impl": spec}, fragment)


def test_ack_first_passes_when_the_pel_is_empty_and_the_loss_is_found(ns: dict[str, Any]) -> None:
    prepared("04.2", ns)
    assert "пока не определены" in verdict("04.2", ns).message
    assert "события [5] потеряны" in passes("04.2", solved("04.2", ns))
    says("04.2", {**ns, "broken_lost": {5, 10}}, "`broken_lost` не то")
    says("04.2", {**ns, "broken_pel": 1}, "`broken_pel` не совпадает")


def test_ack_first_sees_a_consumer_that_still_acks_after_the_work(ns: dict[str, Any]) -> None:
    prepared("04.2", ns)
    lab1.consume_once(ns["r"], ns["broken_stream"], "billing", "billing-1", ns["record_work"], block_ms=200)
    says("04.2", {**ns, "broken_pel": 1, "broken_lost": set()}, "`XACK` у вас всё ещё после обработки")


def test_a_hurried_rescuer_takes_from_a_live_consumer(ns: dict[str, Any]) -> None:
    assert "Спасатель забрал" in passes("04.3", solved("04.3", ns))
    says("04.3", {**ns, "hurry_taken_from_live": 99}, "не совпадает с числом строк")


def test_a_patient_rescuer_takes_nothing_and_is_told_why(ns: dict[str, Any]) -> None:
    prepared("04.3", ns)
    ns["start_live_batch"]()
    _, journal = lab1.rescue_once(
        ns["r"], ns["hurry_stream"], "billing", "rescuer", ns["always_ok"], min_idle_ms=60_000
    )
    says("04.3", {**ns, "hurry_journal": journal, "hurry_taken_from_live": 0}, "Спасатель ничего не забрал")
