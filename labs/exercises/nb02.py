"""Exercise checks of notebook 02 (consumer groups): ``check("02.1")`` ... ``check("02.4")``.

Each check reads the group's state on the running Redis and compares it with what the
student's cell left behind; the messages say what to look at, never the numbers to type in.
The streams are made by the exercise's own preparing cell (see the notebook), under the
notebook's key prefix ``P``:

- 02.1 «Два упавших консьюмера»: ``P + "ex:two"``; billing-1 fails every 4th entry, billing-2
  every 3rd, and they record what failed in the hash ``P + "ex:two:failed"`` (id -> consumer).
  The student rescues everything and journals whose it was: ``two_journal``.
- 02.2 «COUNT и min idle вместе»: ``claiming.double_processing_run`` on ``P + "ex:batch:20"`` and
  ``P + "ex:batch:5"`` (``batch_20``, ``batch_5``) and the student's forecast ``twice_20_predicted``.
- 02.3 «Где зависло?»: ``P + "ex:stuck"``; billing-2 took two entries and died, billing-1 took
  four later and acked three. The student reads XPENDING into ``pending_by_consumer`` and
  ``oldest_holder``.
- 02.4 «Спасите зависшее»: ``P + "ex:rescue"``; billing-2 took three of five entries and
  died. The student claims them as ``rescuer`` with XAUTOCLAIM and acks them; ``rescued``.
"""

from __future__ import annotations

from collections.abc import Mapping

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import named_stream, number, of_kind
from labs.experiments.claiming import ClaimRun

GROUP = "billing"
TWO_STREAM = "ex:two"
STUCK_STREAM = "ex:stuck"
RESCUE_STREAM = "ex:rescue"
RESCUER = "rescuer"
DEAD_HELD = 3  # how many entries billing-2 took before it died, in 02.4
BATCH_MIN_IDLE_MS = 500  # 02.2
BATCH_WORK_MS = 50  # 02.2
FORECAST_SLACK = 3  # 02.2: the forecast may miss the measured duplicates by this many (real timings)


def _verify_two_failing(ns: Mapping[str, object]) -> str:
    """02.1: both consumers' failures rescued and acked, each journaled under the consumer it failed in."""
    client, stream = named_stream(ns, TWO_STREAM)
    failed = {str(k): str(v) for k, v in client.hgetall(stream + ":failed").items()}
    journal = of_kind(ns["two_journal"], (list, tuple), "two_journal", "списком пар (ID записи, у кого её забрали)")
    pending = int(client.xpending(stream, GROUP)["pending"])
    expect(
        pending == 0,
        f"В PEL группы ещё {pending} зап.: спасатель должен забрать всё зависшее (у обоих консьюмеров) и подтвердить.",
    )
    names = {str(c["name"]) for c in client.xinfo_consumers(stream, GROUP)}
    expect(RESCUER in names, "В группе нет консьюмера `rescuer`: записи забирают `XAUTOCLAIM` от его имени.")
    pairs = {}
    for row in journal:
        if not (isinstance(row, list | tuple) and len(row) == 2):
            raise Miss("Каждая строка `two_journal` — пара (ID, консьюмер).")
        pairs[str(row[0])] = str(row[1])
    expect(
        set(pairs) == set(failed),
        "В журнале не те записи: в нём должны быть ровно те, что упали у обоих консьюмеров (их забрал спасатель), "
        "по одной строке на запись.",
    )
    expect(
        "rescuer" not in pairs.values(),
        "В журнале владелец — сам `rescuer`: владельцев надо узнать по `XPENDING` до `XAUTOCLAIM`, "
        "после него все записи уже числятся за спасателем.",
    )
    expect(
        pairs == failed,
        "Записи те, но у части из них указан не тот владелец: берите консьюмера из расширенного `XPENDING` "
        "(`xpending_range`, поле `consumer`) для каждой записи.",
    )
    owners = sorted(set(failed.values()))
    return (
        f"Спасатель забрал {len(failed)} записей у {', '.join(owners)} и подтвердил их; журнал совпал с записями "
        "самих консьюмеров. На живой панели это были бы зубцы PEL у обоих, а не у одного `billing-2`."
    )


def _claim_run(ns: Mapping[str, object], name: str, entries: int) -> ClaimRun:
    run = of_kind(ns[name], ClaimRun, name, "результатом `claiming.double_processing_run(...)`")
    expect(
        (run.min_idle_ms, run.entries) == (BATCH_MIN_IDLE_MS, entries),
        f"`{name}`: нужен прогон с `min_idle_ms=500` и `entries={entries}`.",
    )
    client, stream = named_stream(ns, f"ex:batch:{entries}")
    expect(
        client.xlen(stream) == entries,
        f'В стриме `P + "ex:batch:{entries}"` не {entries} записей: прогон `{name}` шёл на другом стриме.',
    )
    return run


def _verify_batch(ns: Mapping[str, object]) -> str:
    """02.2: part of a long batch is processed twice, a short batch is not; the forecast is near the count."""
    long_run, short_run = _claim_run(ns, "batch_20", 20), _claim_run(ns, "batch_5", 5)
    expect(
        short_run.duplicates == 0 or short_run.held_max_ms > BATCH_MIN_IDLE_MS,
        "В пачке из 5 есть дубли, хотя вся она обработана быстрее min idle: проверьте `work_ms=50`.",
    )
    expect(
        0 < long_run.duplicates < long_run.entries,
        "В пачке из 20 дважды обработаны все записи или ни одной: проверьте `min_idle_ms=500` и `work_ms=50`.",
    )
    forecast = number(ns["twice_20_predicted"], "twice_20_predicted")
    ideal = long_run.entries - BATCH_MIN_IDLE_MS // BATCH_WORK_MS  # exact 50 ms handlings; a loaded machine adds some
    expect(
        abs(forecast - long_run.duplicates) <= FORECAST_SLACK or abs(forecast - ideal) <= 1,
        "Прогноз далёк от замера. Запись номер k пачки ждёт, пока обработают k записей перед ней, и всё это "
        "время её idle растёт; спасатель заберёт её, если idle перевалит за min idle раньше, чем придёт XACK.",
    )
    return (
        f"Из 20 дважды обработаны {long_run.duplicates}, из 5 — {short_run.duplicates}. Дубли — хвост пачки: "
        "записи, которые ждали своей очереди дольше min idle. Поэтому min idle сравнивают не со временем одной "
        "обработки, а с «пачка × обработка», а `COUNT` и `min idle` подбирают вместе."
    )


def _verify_where_stuck(ns: Mapping[str, object]) -> str:
    """02.3: the student's view of the PEL per consumer and its oldest entry's holder, against XPENDING."""
    client, stream = named_stream(ns, STUCK_STREAM)
    by_consumer, holder = ns["pending_by_consumer"], ns["oldest_holder"]
    if not isinstance(by_consumer, Mapping):
        raise Miss("`pending_by_consumer` должен быть словарём {имя консьюмера: сколько записей у него в PEL}.")
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


def _verify_rescue(ns: Mapping[str, object]) -> str:
    """02.4: the dead consumer's entries were claimed by ``rescuer``, acked, and are still in the stream."""
    client, stream = named_stream(ns, RESCUE_STREAM)
    rescued = ns["rescued"]
    if not isinstance(rescued, list | tuple):
        raise Miss("`rescued` должен быть списком ID записей, которые забрал спасатель.")
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
        f"В PEL группы ещё {pending} зап. Забрать мало: после обработки каждую забранную запись надо подтвердить XACK.",
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
        id="02.1",
        title="Два упавших консьюмера",
        needs=("two_journal",),
        verify=_verify_two_failing,
        nudge=(
            "Кому принадлежала запись, знает PEL — но только до захвата: после XAUTOCLAIM владелец уже "
            "`rescuer`."
        ),
        hint=(
            "Расширенная форма XPENDING отвечает строкой на каждую зависшую запись, и в строке есть её "
            "консьюмер. В каком порядке её спросить относительно захвата, чтобы владельцы в журнале были "
            "прежними, а не `rescuer`?"
        ),
    ),
    Exercise(
        id="02.2",
        title="COUNT и min idle вместе",
        needs=("batch_20", "batch_5", "twice_20_predicted"),
        verify=_verify_batch,
        nudge=(
            "Записи пачки подтверждаются по одной, друг за другом; спасатель забирает те, что простаивают "
            "дольше min idle."
        ),
        hint=(
            "Два прогона `claiming.double_processing_run` с параметрами из условия (20 и 5 записей). "
            "Прогноз: запись k подтверждается примерно через (k + 1) × work_ms после чтения — сколько из "
            "20 не успеют до min idle?"
        ),
    ),
    Exercise(
        id="02.3",
        title="Где зависло?",
        needs=("pending_by_consumer", "oldest_holder"),
        verify=_verify_where_stuck,
        nudge=(
            "Сколько записей у кого висит — это PEL группы, а не то, сколько каждый прочитал."
        ),
        hint=(
            "Сводка XPENDING (`r.xpending`) даёт список консьюмеров с числом записей; расширенная форма "
            "(`r.xpending_range`) даёт у каждой записи консьюмера и `time_since_delivered`."
        ),
    ),
    Exercise(
        id="02.4",
        title="Спасите зависшее",
        needs=("rescued",),
        verify=_verify_rescue,
        nudge=(
            "Чужие зависшие записи забирают командой, которая сама находит записи старше min idle; "
            "забрать мало — их надо ещё и подтвердить."
        ),
        hint=(
            "XAUTOCLAIM консьюмером `rescuer` с min idle 100 мс возвращает тройку: курсор, забранные "
            "записи (пары ID и поля) и удалённые ID. ID из второго элемента подтвердите XACK."
        ),
    ),
)
