"""Exercise checks of notebook 02 (consumer groups): ``check("02.3")``, ``check("02.4")``.

Each check reads the group's state on the running Redis and compares it with what the
student's cell left behind; the messages say what to look at, never the numbers to type in.
The streams are made by the exercise's own preparing cell (see the notebook), under the
notebook's key prefix ``P``:

- 02.3 «Где зависло?»: ``P + "ex:stuck"``; billing-2 took two entries and died, billing-1 took
  four later and acked three. The student reads XPENDING into ``pending_by_consumer`` and
  ``oldest_holder``.
- 02.4 «Спасите зависшее»: ``P + "ex:rescue"``; billing-2 took three of five entries and
  died. The student claims them as ``rescuer`` with XAUTOCLAIM and acks them; ``rescued``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from labs.exercises.exercise import Exercise, expect

GROUP = "billing"
STUCK_STREAM = "ex:stuck"
RESCUE_STREAM = "ex:rescue"
RESCUER = "rescuer"
DEAD_HELD = 3  # how many entries billing-2 took before it died, in 02.4


def _stream(ns: Mapping[str, Any], suffix: str) -> tuple[redis.Redis, str]:
    client, stream = ns["r"], ns["P"] + suffix
    expect(
        client.exists(stream),
        f"Стрима `P + \"{suffix}\"` нет в Redis: выполните ячейку, которая готовит задание (она перед вашей).",
    )
    return client, stream


def _verify_where_stuck(ns: Mapping[str, Any]) -> str:
    """02.3: the student's view of the PEL per consumer and its oldest entry's holder, against XPENDING."""
    client, stream = _stream(ns, STUCK_STREAM)
    by_consumer, holder = ns["pending_by_consumer"], ns["oldest_holder"]
    expect(
        isinstance(by_consumer, Mapping),
        "`pending_by_consumer` должен быть словарём {имя консьюмера: сколько записей у него в PEL}.",
    )
    summary = client.xpending(stream, GROUP)
    truth = {str(c["name"]): int(c["pending"]) for c in summary["consumers"]}
    expect(
        set(by_consumer) == set(truth),
        f"В `pending_by_consumer` не те консьюмеры: записи в PEL группы держат {len(truth)} консьюмера. "
        "Возьмите их из сводки XPENDING (или из XINFO CONSUMERS), а не из того, кто что читал.",
    )
    expect(
        {name: int(count) for name, count in by_consumer.items()} == truth,
        "Консьюмеры те, но числа не совпадают с PEL. Подтверждённые (XACK) записи в PEL уже не лежат: "
        "считайте по XPENDING, а не по тому, сколько записей прочитано.",
    )
    entries = client.xpending_range(stream, GROUP, min="-", max="+", count=100)
    oldest = max(entries, key=lambda e: int(e["time_since_delivered"]))
    expect(
        holder == oldest["consumer"],
        "`oldest_holder` держит не самую давнюю запись. В расширенном XPENDING (`xpending_range`) у "
        "каждой записи есть idle — `time_since_delivered`: найдите запись с наибольшим.",
    )
    return (
        "PEL по консьюмерам и владелец самой давней записи совпадают с Redis. Её спасатель с "
        "XAUTOCLAIM заберёт первой: min idle сравнивается как раз с этим idle."
    )


def _verify_rescue(ns: Mapping[str, Any]) -> str:
    """02.4: the dead consumer's entries were claimed by ``rescuer``, acked, and are still in the stream."""
    client, stream = _stream(ns, RESCUE_STREAM)
    rescued = ns["rescued"]
    expect(
        isinstance(rescued, list | tuple),
        "`rescued` должен быть списком ID записей, которые забрал спасатель.",
    )
    head = [str(msg_id) for msg_id, _ in client.xrange(stream, count=DEAD_HELD) or []]
    names = {str(c["name"]) for c in client.xinfo_consumers(stream, GROUP)}
    expect(
        client.xlen(stream) == 5,
        "В стриме стало меньше записей. Спасатель ничего не удаляет: XACK снимает запись с учёта "
        "группы, а сама запись остаётся в стриме (XDEL тут не нужен). Выполните готовящую ячейку заново.",
    )
    expect(
        RESCUER in names,
        "В группе нет консьюмера `rescuer`: записи не забирали. Сначала XAUTOCLAIM от имени "
        "`rescuer` — только он переносит записи мёртвого консьюмера к живому.",
    )
    pending = int(client.xpending(stream, GROUP)["pending"])
    expect(
        pending == 0,
        f"В PEL группы ещё {pending} зап. Забрать мало: после обработки каждую забранную запись "
        "надо подтвердить XACK.",
    )
    expect(
        sorted(str(m) for m in rescued) == sorted(head),
        "PEL пуст, но в `rescued` не те ID. Положите туда ровно то, что вернул XAUTOCLAIM "
        "(второй элемент ответа: список пар ID и полей) — записи мёртвого billing-2, и только их.",
    )
    return (
        "Записи billing-2 забрал `rescuer`, обработал и подтвердил; в стриме они остались — XACK не "
        "удаляет. Именно так работает спасатель в лабораторной 1."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="02.3",
        title="Где зависло?",
        needs=("pending_by_consumer", "oldest_holder"),
        verify=_verify_where_stuck,
        hint=(
            "Сводка: r.xpending(stream, group) — в ней список consumers с полями name и pending. "
            "Подробности: r.xpending_range(stream, group, min='-', max='+', count=100) — у каждой "
            "записи есть consumer и time_since_delivered (idle в миллисекундах)."
        ),
    ),
    Exercise(
        id="02.4",
        title="Спасите зависшее",
        needs=("rescued",),
        verify=_verify_rescue,
        hint=(
            "r.xautoclaim(stream, group, 'rescuer', min_idle_time=100) возвращает тройку: курсор, "
            "забранные записи (пары ID и поля) и удалённые ID. Возьмите ID из второго элемента и "
            "подтвердите их одним r.xack(stream, group, *ids)."
        ),
    ),
)
