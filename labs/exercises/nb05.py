"""Exercise checks of notebook 05 (the read loop and idempotency): ``check("05.1")`` ... ``check("05.3")``.

- 05.1 «Граница BLOCK и таймаута»: ``block_past_socket_timeout`` with ``socket_timeout_s=0.5`` and
  ``BLOCK`` below and above it (``edge_results``: block ms -> outcome) on ``P + "ex:edge"``.
- 05.2 «Пачка целиком и на одну больше»: ``work_held_at_crash`` with ``COUNT 64`` and a crash after
  64 and after 65 handled entries (``held_64``, ``held_65``), on ``P + "ex:held:64"`` / ``":65"``.
- 05.3 «TTL метки и поздний повтор»: ``late_replay`` with a replay after 300 ms for several TTLs
  (``effects_by_ttl``: ttl ms -> effects), each on ``P + "ex:ttl:<ttl>"``.

The checks of 05.2 and 05.3 read the PEL and the streams the runs left in Redis and compare them
with the student's figures (05.2 holds no expected figure: the PEL follows from how many entries
each run was handed, read from its stream) (an idle ``XREADGROUP`` leaves no trace, so 05.1 judges the outcomes
alone); where timing decides (05.1, 05.3), values near the boundary are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from labs.exercises.exercise import Exercise, expect
from labs.exercises.facts import client_of, named_stream, number, of_kind, prefix_of

GROUP = "billing"
SOCKET_TIMEOUT_MS = 500  # 05.1
EDGE_SLACK_MS = 60  # 05.1: a BLOCK this close to the socket timeout may go either way
COUNT = 64  # 05.2
REPLAY_AFTER_MS = 300  # 05.3
TTL_SLACK_MS = 60  # 05.3: a TTL this close to the replay delay may go either way


def _verify_edge(ns: Mapping[str, object]) -> str:
    """05.1: BLOCK below the socket timeout reads "ok", above it the client reports a dead socket."""
    named_stream(ns, "ex:edge")
    results = of_kind(ns["edge_results"], dict, "edge_results", "словарём {BLOCK в мс: исход}")
    expect(
        all(isinstance(k, int) and v in ("ok", "TimeoutError") for k, v in results.items()),
        "Ключи `edge_results` — `block_ms` (целые), значения — то, что вернул `block_past_socket_timeout`: "
        '`"ok"` или `"TimeoutError"`.',
    )
    expect(
        any(k < SOCKET_TIMEOUT_MS for k in results) and any(k > SOCKET_TIMEOUT_MS for k in results),
        "Нужны оба случая: один `BLOCK` короче таймаута сокета (0,5 с), другой длиннее.",
    )
    for block_ms, outcome in results.items():
        if abs(block_ms - SOCKET_TIMEOUT_MS) <= EDGE_SLACK_MS:
            continue  # too close to call: scheduling decides
        expected = "ok" if block_ms < SOCKET_TIMEOUT_MS else "TimeoutError"
        expect(
            outcome == expected,
            f"`BLOCK {block_ms}` дал не тот исход, что должен при `socket_timeout_s=0.5`: проверьте, что таймаут "
            "сокета в прогонах именно 0,5 с.",
        )
    return (
        "Граница — сам таймаут сокета: пока сервер держит `BLOCK`, он молчит, и клиент с таймаутом короче `BLOCK` "
        "принимает здоровое пустое чтение за мёртвый сокет. У самой границы решают миллисекунды (сеть, планировщик, "
        "пауза сервера), поэтому `solutions` ставит таймаут на секунды больше `BLOCK`, а не на 0,1 с."
    )


def _batches_read(client: redis.Redis, stream: str) -> int:
    """How many entries the group has been handed (its ``last-delivered-id`` counted in the stream)."""
    group = next((g for g in client.xinfo_groups(stream) if g["name"] == GROUP), None)
    return 0 if group is None else len(client.xrange(stream, "-", group["last-delivered-id"]) or [])


def _verify_held(ns: Mapping[str, object]) -> str:
    """05.2: what the sequential loop holds at a crash follows from when it reads: the next batch only once the
    last one is done. Each run's stream says how much it was handed; its PEL is that minus what it handled."""
    client, p = client_of(ns), prefix_of(ns)
    for after in (COUNT, COUNT + 1):
        expect(
            client.exists(f"{p}ex:held:{after}"),
            f'Стрима `P + "ex:held:{after}"` нет: у каждого прогона свой стрим — второй, похоже, шёл на стриме '
            "первого (скопированная строка?) и затёр его.",
        )
    pels = {}
    for after in (COUNT, COUNT + 1):
        stream, name = f"{p}ex:held:{after}", f"held_{after}"
        pels[after] = int(client.xpending(stream, GROUP)["pending"])
        handed = _batches_read(client, stream)
        expect(
            handed == COUNT * -(-after // COUNT) and pels[after] == handed - after,
            f'Прогон на `P + "ex:held:{after}"` не такой, какой даёт последовательный цикл с `COUNT 64`: проверьте '
            f"`count=64`, `read_ahead=False` и `crash_after_handled={after}` (и что стрим — свой у каждого прогона).",
        )
        expect(
            number(ns[name], name) == pels[after],
            f'`{name}` не совпадает с `XPENDING` стрима `P + "ex:held:{after}"`: берите `held_at_crash` его прогона.',
        )
    return (
        f"После {COUNT} обработанных цикл как раз закончил пачку и не успел прочитать следующую — в руках "
        f"{pels[COUNT]}. После {COUNT + 1} он уже прочитал следующие {COUNT} и сделал одну: в PEL {pels[COUNT + 1]} "
        "записи, которые теперь ждут спасателя. Работа в руках при падении — от нуля до целой пачки, и решает "
        "момент, а не `COUNT` сам по себе."
    )


def _verify_ttl(ns: Mapping[str, object]) -> str:
    """05.3: a marker that outlives the replay catches it (1 effect); a shorter one lets it through (2)."""
    effects = of_kind(
        ns["effects_by_ttl"], dict, "effects_by_ttl", "словарём {TTL метки в мс: сколько раз случился эффект}"
    )
    expect(
        all(isinstance(k, int) and v in (1, 2) for k, v in effects.items()),
        "Ключи — `ttl_ms` (целые), значения — то, что вернул `late_replay`: число эффектов (1 или 2).",
    )
    expect(
        set(effects.values()) == {1, 2},
        "Нужны оба исхода: TTL, при котором повтор пойман (1 эффект), и TTL, при котором прошёл (2).",
    )
    for ttl_ms, count in effects.items():
        named_stream(ns, f"ex:ttl:{ttl_ms}")
        if abs(ttl_ms - REPLAY_AFTER_MS) <= TTL_SLACK_MS:
            continue  # the marker expires about when the replay comes: either way is honest
        expected = 1 if ttl_ms > REPLAY_AFTER_MS else 2
        expect(
            count == expected,
            f"TTL {ttl_ms} мс дал {count} эфф., а повтор приходит через 300 мс: проверьте `replay_after_ms=300`.",
        )
    return (
        "Метка ловит повтор, только пока жива: TTL метки должен быть не меньше самого позднего повтора — то есть "
        "retention стрима (и того, сколько запись может пролежать в DLQ до переигрывания). «retention 24 ч, TTL 1 ч» "
        "— это случай 2 таблицы."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="05.1",
        title="Граница BLOCK и таймаута",
        needs=("edge_results",),
        verify=_verify_edge,
        nudge=(
            "BLOCK держит соединение молча; если это дольше таймаута сокета клиента, клиент решит, что "
            "сервер пропал."
        ),
        hint=(
            "Функция `block_past_socket_timeout` для двух значений BLOCK: одно меньше таймаута сокета 0,5 "
            "с, другое больше; результаты — в словарь по BLOCK."
        ),
    ),
    Exercise(
        id="05.2",
        title="Пачка целиком и на одну больше",
        needs=("held_64", "held_65"),
        verify=_verify_held,
        nudge=(
            "Сколько записей держит воркер в момент падения, зависит от того, читает ли он следующую "
            "пачку сразу после обработанной."
        ),
        hint=(
            "Функция `work_held_at_crash` с пачкой 64 без упреждающего чтения: падение после 64 "
            "обработанных и после 65. Подумайте, что цикл делает сразу после того, как обработал всю "
            "пачку."
        ),
    ),
    Exercise(
        id="05.3",
        title="TTL метки и поздний повтор",
        needs=("effects_by_ttl",),
        verify=_verify_ttl,
        nudge=(
            "Метка идемпотентности защищает от повтора, только пока она жива."
        ),
        hint=(
            "Функция `late_replay` с повтором через 300 мс для двух TTL метки: одного заметно меньше 300 "
            "мс и одного заметно больше; результаты — в словарь по TTL."
        ),
    ),
)
