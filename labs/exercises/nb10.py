"""Exercise checks of notebook 10 (monitoring and incidents): ``check("10.3")`` ... ``check("10.5")``.

The streams and keys are made by each exercise's preparing cell on the notebook's ``r`` (the
``aof`` node, which Prometheus scrapes), under the key prefix ``P``. Two checks ask Prometheus
(``prom``, a :class:`~labs.launcher.prom_api.PrometheusAPI`, defined by the notebook's first cell)
and wait, with a deadline, for the scrape that shows the prepared streams:

- 10.3 «Отставание без готового правила»: ``lag_query``, PromQL for a group's lag in seconds
  from the exporter's raw series (no ``stream_group:`` recording rule). Prepared: stream
  ``P + "ex:lag:orders"`` whose group read up to an entry 20 s older than the newest one.
- 10.4 «Самый тяжёлый ключ»: ``heaviest``, the key under ``P + "ex:big:"`` that takes the most
  memory (``MEMORY USAGE``), which ``--bigkeys`` does not say (it compares keys within a type only,
  hashes and lists by element count, strings by length; ``--memkeys`` ranks each type by memory).
- 10.5 «Правило без ложной тревоги»: ``alert_expr``, PromQL that returns a group with a backlog
  and only idle consumers, and neither a quiet group whose consumer is just as idle nor a busy
  group whose backlog a live consumer is reading. Prepared: ``P + "ex:stuck:orders"`` (backlog,
  idle consumer), ``P + "ex:quiet:orders"`` (no backlog) and ``P + "ex:busy:orders"`` (backlog;
  the check itself keeps its consumer reading while it waits for Prometheus, so both halves of
  the expression are tested: a backlog alone and an idle consumer alone each fail).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import cast

import redis

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import client_of, made, prefix_of
from labs.launcher.errors import LauncherError
from labs.launcher.prom_api import PrometheusAPI, Series
from solutions.stream_ids import id_ms

GROUP = "billing"
LAG_STREAM = "ex:lag:orders"
BIG_PREFIX = "ex:big:"
STUCK_STREAM = "ex:stuck:orders"
QUIET_STREAM = "ex:quiet:orders"
BUSY_STREAM = "ex:busy:orders"
BUSY_BACKLOG = 500  # the check reads one entry per poll: the backlog outlasts SCRAPE_WAIT_S
POLL_S = 0.5
IDLE_THRESHOLD_S = 2.0  # the lab copy's StreamNoLiveConsumer: 120 s / 60
SCRAPE_WAIT_S = 15.0
SETUP = ("r", "P", "prom")


# -- the preparing cells call these -------------------------------------------------------


def prepare_lag(r: redis.Redis, prefix: str, *, behind_s: int = 20) -> str:
    """10.3: ``P + "ex:lag:orders"``, 30 entries one second apart (ids in the past); the group read up to
    the entry ``behind_s`` seconds older than the newest. Returns the stream's name."""
    stream = prefix + LAG_STREAM
    r.delete(stream)
    now_ms = int(time.time() * 1000)
    ids = [f"{now_ms - (29 - i) * 1000}-0" for i in range(30)]
    for msg_id in ids:
        r.xadd(stream, {"type": "order.paid", "order_id": "o-1", "amount": "1.00"}, id=msg_id)
    r.xgroup_create(stream, GROUP, id=ids[29 - behind_s])
    return stream


def prepare_big(r: redis.Redis, prefix: str) -> list[str]:
    """10.4: under ``P + "ex:big:"`` a hash of 5,000 short fields, a 1 MB string, a list of 20,000 tiny items."""
    big = prefix + BIG_PREFIX
    r.delete(*(big + k for k in ("hash", "blob", "list")))
    r.hset(big + "hash", mapping={f"f{i}": "v" for i in range(5_000)})
    r.set(big + "blob", "x" * 1_000_000)
    r.rpush(big + "list", *(["1"] * 20_000))
    return sorted(str(k) for k in r.scan_iter(match=big + "*"))


def prepare_stuck_and_quiet(r: redis.Redis, prefix: str) -> tuple[str, str, str]:
    """10.5: each stream had one entry read and acked by consumer ``c1``; the stuck one got five more
    entries since, the busy one a backlog of ``BUSY_BACKLOG`` that ``c1`` reads (one entry per poll of
    the check), the quiet one nothing. Returns (stuck, quiet, busy)."""
    streams = prefix + STUCK_STREAM, prefix + QUIET_STREAM, prefix + BUSY_STREAM
    for stream in streams:
        r.delete(stream)
        first = r.xadd(stream, {"order_id": "o-1"})
        r.xgroup_create(stream, GROUP, id="0")
        r.xreadgroup(GROUP, "c1", {stream: ">"}, count=1)
        r.xack(stream, GROUP, first)
    for i in range(5):
        r.xadd(streams[0], {"order_id": f"o-{i + 2}"})
    pipe = r.pipeline(transaction=False)
    for i in range(BUSY_BACKLOG):
        pipe.xadd(streams[2], {"order_id": f"o-{i + 2}"})
    pipe.execute()
    return streams


# -- the checks ------------------------------------------------------------------------------


def prometheus(ns: Mapping[str, object]) -> PrometheusAPI:
    """The notebook's Prometheus API ``prom``."""
    return made(ns, "prom", PrometheusAPI)


def _last_ms(stream_id: str) -> int:
    return id_ms(stream_id)


def _query(prom: PrometheusAPI, expr: object) -> list[Series]:
    if not (isinstance(expr, str) and expr.strip()):
        raise Miss("Запрос должен быть строкой PromQL.")
    try:
        return prom.query(expr)
    except LauncherError as exc:
        raise Miss(f"Prometheus не принял запрос: {exc}") from None


def _wait_series(prom: PrometheusAPI, selector: str) -> None:
    """Wait until Prometheus has scraped what the preparing cell made (a few seconds at most)."""
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while not prom.query(selector):
        expect(time.monotonic() < deadline,
               "Prometheus так и не увидел подготовленный стрим: выполните готовящую ячейку ещё раз.")
        time.sleep(0.5)


def _for_stream(result: list[Series], stream: str) -> list[Series]:
    return [s for s in result if s["metric"].get("stream") == stream]


def _verify_lag(ns: Mapping[str, object]) -> str:
    """10.3: the student's PromQL gives the group's lag in seconds, computed from the two ids."""
    client, prom, stream = client_of(ns), prometheus(ns), prefix_of(ns) + LAG_STREAM
    query = ns["lag_query"]
    expect(client.exists(stream), "Стрима для задания нет: выполните готовящую ячейку (она перед вашей).")
    expect("stream_group:" not in str(query),
           "Задание — без готового правила: соберите отставание из сырых рядов экспортера.")
    _wait_series(prom, f'redis_stream_group_last_delivered_id{{stream="{stream}"}}')
    info = client.xinfo_stream(stream)
    group = next(g for g in client.xinfo_groups(stream) if g["name"] == GROUP)
    truth_s = (_last_ms(info["last-generated-id"]) - _last_ms(group["last-delivered-id"])) / 1000
    mine = _for_stream(_query(prom, query), stream)
    expect(mine, "В ответе нет ряда с меткой stream этого стрима: вычитание потеряло метки? Разность двух "
                 "рядов с разными наборами меток сопоставляют через on(...) и group_right.")
    expect(len(mine) == 1 and mine[0]["metric"].get("group") == GROUP,
           "Ряд для стрима есть, но без метки group (или их несколько): в результате должна остаться "
           "метка group из redis_stream_group_last_delivered_id.")
    value = float(mine[0]["value"][1])
    expect(abs(value - truth_s) < 0.01,
           "Число не совпадает с разностью ID в Redis. Оба ряда — миллисекунды (время из ID), "
           "а ответ нужен в секундах.")
    return (f"Отставание {value:g} с совпало с XINFO: последний выданный ID отстаёт от головы стрима. "
            "Экспортер 1.45 отдаёт ID как время в мс: этого хватает для отставания во времени, но не в записях.")


def _verify_heaviest(ns: Mapping[str, object]) -> str:
    """10.4: the key under the prefix with the largest MEMORY USAGE."""
    client = client_of(ns)
    prefix = prefix_of(ns) + BIG_PREFIX
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    expect(len(keys) >= 3, "Ключей задания нет: выполните готовящую ячейку (она перед вашей).")
    usage = {str(k): int(client.memory_usage(k, samples=0) or 0) for k in keys}
    heaviest = ns["heaviest"]
    if not isinstance(heaviest, str):
        raise Miss("`heaviest` должен быть именем ключа (строкой).")
    expect(heaviest in usage, "Такого ключа под префиксом задания нет: берите имена из SCAN с MATCH.")
    expect(usage[heaviest] == max(usage.values()),
           "Это не самый тяжёлый ключ по памяти. --bigkeys сравнивает ключи только внутри типа (хеши и "
           "списки — по числу элементов, строки — по длине), а задание — байты памяти: MEMORY USAGE ключа "
           "(с SAMPLES 0, чтобы посчитать все элементы) или redis-cli --memkeys.")
    return (f"{heaviest}: {usage[heaviest]:,} байт — больше всех под префиксом. По числу элементов лидер "
            "другой: поэтому большие ключи ищут по MEMORY USAGE, а --bigkeys — только первая прикидка.")


def _read_one(client: redis.Redis, stream: str) -> None:
    """The busy group's consumer at work: one entry read and acked (its idle time starts again)."""
    reply = cast(list[tuple[str, list[tuple[str, dict[str, str]]]]],  # RESP2, decoded
                 client.xreadgroup(GROUP, "c1", {stream: ">"}, count=1) or [])
    for _, entries in reply:
        client.xack(stream, GROUP, *(msg_id for msg_id, _ in entries))


def _verify_no_false_alarm(ns: Mapping[str, object]) -> str:
    """10.5: the expression returns the stuck group, not the quiet one, not the busy one."""
    client, prom, prefix = client_of(ns), prometheus(ns), prefix_of(ns)
    stuck, quiet, busy = prefix + STUCK_STREAM, prefix + QUIET_STREAM, prefix + BUSY_STREAM
    expect(all(client.exists(s) for s in (stuck, quiet, busy)),
           "Стримов задания нет: выполните готовящую ячейку (она перед вашей).")
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while True:
        _read_one(client, busy)  # the busy consumer keeps reading while Prometheus catches up
        idle = {s["metric"]["stream"]: float(s["value"][1])
                for s in prom.query(f'stream_group:consumer_idle_min_seconds{{stream=~"{prefix}ex:.+"}}')}
        lag = {s["metric"]["stream"]: float(s["value"][1])
               for s in prom.query(f'stream_group:lag_entries{{stream="{busy}"}}')}
        if (min(idle.get(stuck, 0.0), idle.get(quiet, 0.0)) > IDLE_THRESHOLD_S
                and idle.get(busy, IDLE_THRESHOLD_S) < IDLE_THRESHOLD_S / 2 and lag.get(busy, 0.0) > 0):
            break
        expect(time.monotonic() < deadline, "Prometheus не видит простоя консьюмеров: выполните готовящую ячейку.")
        time.sleep(POLL_S)
    _read_one(client, busy)
    result = _query(prom, ns["alert_expr"])
    streams = {s["metric"].get("stream") for s in result}
    expect(stuck in streams, "Застрявшей группы (бэклог и все консьюмеры молчат) в ответе нет: выражение "
                             "не сработает на настоящую беду. Нужны и бэклог, и простой.")
    expect(quiet not in streams, "В ответе тихий стрим: его консьюмер простаивает, но ждать ему нечего. "
                                 "Простой без бэклога — не авария: сочетайте простой с бэклогом.")
    expect(busy not in streams, "В ответе группа, чей консьюмер читает прямо сейчас: бэклог есть, но его "
                                "разбирают. Бэклог без простоя — не авария: сочетайте бэклог с простоем.")
    return ("Выражение ловит группу с бэклогом и молчащими консьюмерами и молчит о тихом стриме и о группе, "
            "которая разбирает свой бэклог, — так устроен StreamNoLiveConsumer в monitoring/rules/streams.yml.")


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="10.3",
        title="Отставание без готового правила",
        needs=("lag_query",),
        setup=SETUP,
        verify=_verify_lag,
        nudge=(
            "Отставание по времени — разница между временем последней записи стрима и временем последней "
            "выданной группе."
        ),
        hint=(
            "Оба момента экспортер отдаёт рядами (время из ID, в миллисекундах), но у ряда группы есть "
            "метка group, а у ряда стрима — нет. Как PromQL вычитает ряды с разными наборами меток, и "
            "какая сторона должна сохранить свои?"
        ),
    ),
    Exercise(
        id="10.4",
        title="Самый тяжёлый ключ",
        needs=("heaviest",),
        verify=_verify_heaviest,
        nudge=(
            "Память, которую занимает ключ, Redis оценивает командой MEMORY USAGE."
        ),
        hint=(
            "MEMORY USAGE по умолчанию оценивает большие хеши и списки по выборке элементов; какой её "
            "параметр заставит посчитать все? Ключи задания найдёт SCAN с шаблоном."
        ),
    ),
    Exercise(
        id="10.5",
        title="Правило без ложной тревоги",
        needs=("alert_expr",),
        setup=SETUP,
        verify=_verify_no_false_alarm,
        nudge=(
            "Бэклог сам по себе не тревога: тревожно, когда он есть, а консьюмеры давно молчат."
        ),
        hint=(
            "Нужны два условия сразу: бэклог группы и простой её самого свежего консьюмера — у обоих есть "
            "правила записи `stream_group:*`. Какой оператор PromQL оставляет ряды одного выражения, "
            "для которых есть пара в другом, и по каким меткам их сопоставить?"
        ),
    ),
)
