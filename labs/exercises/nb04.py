"""Exercise checks of notebook 04 (lab 1): ``check("04.1")`` ... ``check("04.3")``.

They use only the lab's contract (the four functions of ``labs/lab1/starter.py`` and the journal
entries ``rescue_once`` returns) and Redis itself, not the lab runner's internals:

- 04.1 «Ваша реализация»: ``my_impl`` names the student's module; the check loads it and drives
  steps 1-3 of the notebook on ``P + "ex:impl"``, saying which function and which step fails.
- 04.2 «Подтвердить до работы»: the student's ``consume_ack_first`` on ``P + "ex:broken"`` (five
  events, #5 fails, ``broken_done`` records the work); ``broken_pel`` and ``broken_lost``.
- 04.3 «Спасатель торопится»: ``start_live_batch()`` gives billing-1 a batch it handles slowly in
  a thread (``hurry_live``: what its XACKs returned); the rescuer with a tiny min idle takes
  entries from it; ``hurry_journal`` and ``hurry_taken_from_live``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import ParamSpec, TypeVar

import redis

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import client_of, iterable, made, named_stream, number, of_kind, prefix_of
from labs.lab1.impl import load_impl

GROUP = "billing"
EVENTS = 5  # 04.1 and 04.2: events #1..#5, #5 fails
EMPTY_BLOCK_MS = 200  # 04.1: an empty read with BLOCK must wait about this long
RESCUE_MIN_IDLE_MS = 150  # 04.1
Params = ParamSpec("Params")
R = TypeVar("R")


def _call(name: str, fn: Callable[Params, R], *args: Params.args, **kwargs: Params.kwargs) -> R:
    """Call one of the student's functions; what it raised becomes one line naming the function."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise Miss(f"`{name}` ещё не написана (NotImplementedError): замените `raise` своим кодом.") from None
    except redis.ResponseError as exc:
        raise Miss(f"`{name}`: Redis ответил ошибкой `{exc}` — проверьте аргументы команды.") from None
    except Exception as exc:
        raise Miss(f"`{name}` упала: {type(exc).__name__}: {exc}.") from None


class _Work:
    """The simulated work of the lab: #5 fails; it records each call and whether the entry was still pending."""

    def __init__(self, client: redis.Redis, stream: str):
        self.client, self.stream = client, stream
        self.calls: list[tuple[str, int, bool]] = []  # (msg id, counter, in the PEL at that moment)

    def __call__(self, msg_id: str, fields: Mapping[str, str], worker: str) -> None:
        pending = self.client.xpending_range(self.stream, GROUP, min=msg_id, max=msg_id, count=1)
        counter = int(fields["counter"])
        self.calls.append((str(msg_id), counter, bool(pending)))
        if counter % EVENTS == 0:
            raise RuntimeError(f"simulated failure of #{counter}")


def _load(value: object) -> ModuleType:
    spec = of_kind(value, str, "my_impl", "строкой: путь к файлу (`../my_lab1.py`) или имя модуля")
    try:
        return load_impl(spec)
    except Exception as exc:
        where = " Путь считается от каталога ноутбука (notebooks/): файл в корне — `../my_lab1.py`."
        raise Miss(f"Реализация не загрузилась: {exc}.{where if 'no such file' in str(exc) else ''}") from None


def _steps_1_2(impl: ModuleType, client: redis.Redis, stream: str) -> list[str]:
    """The group (twice) and five events; the ids produce_one returned."""
    expect(
        _call("ensure_group", impl.ensure_group, client, stream, GROUP) is True,
        "`ensure_group` на новом стриме должна создать группу и вернуть True.",
    )
    expect(
        _call("ensure_group", impl.ensure_group, client, stream, GROUP) is False,
        "Повторный `ensure_group` должен вернуть False: ответ BUSYGROUP значит «группа уже есть».",
    )
    ids = [str(_call("produce_one", impl.produce_one, client, stream, n)) for n in range(1, EVENTS + 1)]
    entries = client.xrange(stream) or []  # XRANGE answers an array, never nil
    expect(
        [str(i) for i, _ in entries] == ids,
        "`produce_one` должна вернуть ID, который дал `XADD`, по одной записи на вызов.",
    )
    expect(
        (first := entries[0][1] or {}).get("counter") == "1" and first.get("type") == "order.paid",
        "В полях события нет `type=order.paid` и `counter`: пишите `order_fields(counter)`.",
    )
    return ids


def _step_3(impl: ModuleType, client: redis.Redis, stream: str, ids: list[str]) -> None:
    """consume_once: four done and acked after the work, #5 left pending; an empty read waits on BLOCK."""
    work = _Work(client, stream)
    done = _call("consume_once", impl.consume_once, client, stream, GROUP, "billing-1", work, block_ms=500, count=10)
    expect(len(work.calls) == EVENTS, "`consume_once` должна отдать обработчику каждую прочитанную запись.")
    expect(
        all(in_pel for _, _, in_pel in work.calls),
        "Запись была подтверждена до обработки: `XACK` — только после того, как обработчик вернулся.",
    )
    expect(done == EVENTS - 1, "`consume_once` должна вернуть, сколько записей обработано и подтверждено.")
    summary = client.xpending(stream, GROUP)
    expect(
        summary["pending"] == 1 and client.xpending_range(stream, GROUP, "-", "+", 1)[0]["message_id"] == ids[-1],
        "В PEL должна остаться ровно упавшая запись #5: подтверждайте только то, что обработано.",
    )
    started = time.monotonic()
    empty = _call("consume_once", impl.consume_once, client, stream, GROUP, "billing-1", work, block_ms=EMPTY_BLOCK_MS)
    expect(
        empty == 0 and time.monotonic() - started >= EMPTY_BLOCK_MS / 1000 * 0.8,
        "Пустое чтение вернулось сразу: без `BLOCK` консьюмер крутит пустые запросы. Передайте `block=block_ms`.",
    )


def _step_4(impl: ModuleType, client: redis.Redis, stream: str, ids: list[str]) -> None:
    """rescue_once: a young entry stays; an idle one is taken, redone, acked and journaled with its owner."""
    _, early = _call("rescue_once", impl.rescue_once, client, stream, GROUP, "rescuer", _ok, min_idle_ms=60_000)
    expect(
        not early, "Спасатель забрал запись, которая простаивает меньше min idle: передайте `min_idle_ms` в XAUTOCLAIM."
    )
    time.sleep(RESCUE_MIN_IDLE_MS * 1.5 / 1000)
    cursor, journal = _call(
        "rescue_once", impl.rescue_once, client, stream, GROUP, "rescuer", _ok, min_idle_ms=RESCUE_MIN_IDLE_MS
    )
    expect(str(cursor) == "0-0", "`rescue_once` должна вернуть курсор XAUTOCLAIM: `0-0`, когда PEL пройден до конца.")
    rows = [(j.msg_id, j.from_consumer, j.to_consumer, j.deliveries, j.ok) for j in journal]
    expect(len(rows) == 1 and rows[0][0] == ids[-1], "В журнале спасателя должна быть одна строка — упавшая запись #5.")
    expect(
        rows[0][1:3] == ("billing-1", "rescuer"),
        "Журнал путает владельцев: «от кого» — консьюмер из XPENDING до захвата, «кому» — сам спасатель.",
    )
    expect(
        rows[0][3:] == (2, True), "В строке журнала счётчик доставок — из XPENDING (здесь вторая доставка) и ok=True."
    )
    expect(
        client.xpending(stream, GROUP)["pending"] == 0, "После спасателя PEL должен быть пуст: XACK после обработки."
    )


def _ok(msg_id: str, fields: Mapping[str, str], worker: str) -> None:
    return None


def _verify_impl(ns: Mapping[str, object]) -> str:
    """04.1: the student's module through steps 1-3 of the notebook, one function at a time."""
    client, stream = client_of(ns), prefix_of(ns) + "ex:impl"
    impl = _load(ns["my_impl"])
    client.delete(stream)
    ids = _steps_1_2(impl, client, stream)
    _step_3(impl, client, stream, ids)
    _step_4(impl, client, stream, ids)
    return (
        f"`{ns['my_impl']}` прошла шаги 1–3: группа, события со счётчиком, чтение с BLOCK и XACK после работы, "
        "спасатель с журналом. Теперь весь контур: `IMPL = my_impl` в первой ячейке и «Run All» (шаг 0) или "
        "`make check-lab-1 IMPL=...` в терминале."
    )


def _verify_ack_first(ns: Mapping[str, object]) -> str:
    """04.2: an empty PEL although #5 failed; the loss shows only in the producer's log vs the work log."""
    client, stream = named_stream(ns, "ex:broken")
    group = next(g for g in client.xinfo_groups(stream) if g["name"] == GROUP)
    expect(
        group["lag"] == 0, "Консьюмер прочитал не все пять событий: вызовите свою `consume_ack_first` с `count` ≥ 5."
    )
    pending = int(client.xpending(stream, GROUP)["pending"])
    expect(
        pending == 0,
        "В PEL осталась запись: значит, `XACK` у вас всё ещё после обработки. Нарочно сломайте порядок — "
        "подтверждайте каждую запись сразу после чтения, до обработчика.",
    )
    expect(number(ns["broken_pel"], "broken_pel") == pending, "`broken_pel` не совпадает с `XPENDING` группы.")
    sent = {int(fields["counter"]) for _, fields in client.xrange(stream) or [] if fields}
    lost = of_kind(ns["broken_lost"], (set, frozenset, list, tuple), "broken_lost", "множеством счётчиков")
    expect(
        set(lost) == sent - set(iterable(ns["broken_done"])),
        "`broken_lost` не то: это события, которые продюсер записал (счётчики в самом стриме), а работа над ними так "
        "и не удалась (их нет в `broken_done`).",
    )
    return (
        f"XPENDING пуст, а события {sorted(lost)} потеряны: подтверждены, но не сделаны. Пустой PEL ничего не "
        "доказывает — потерю показала только сверка журнала продюсера с журналом работы. Так и считают проверки "
        "лабораторной: по независимым записям, а не по словам воркера и не по пустому PEL."
    )


def _verify_hurry(ns: Mapping[str, object]) -> str:
    """04.3: the rescuer took entries from a live consumer that failed nothing: each was processed twice."""
    client, stream = named_stream(ns, "ex:hurry")
    done = made(ns, "hurry_done", threading.Event)
    expect(done.wait(5), "billing-1 ещё не доработал пачку: запустите проверку через секунду.")
    journal = of_kind(
        ns["hurry_journal"], (list, tuple), "hurry_journal", "журналом, который вернул `rescue_once` (список строк)"
    )
    expect(
        journal,
        "Спасатель ничего не забрал. Вызывайте его сразу после `start_live_batch()` и короткой паузы, пока billing-1 "
        "занят пачкой, и с min idle меньше времени на пачку.",
    )
    owners = {str(j.from_consumer) for j in journal}
    expect(owners == {"billing-1"}, "Все строки журнала должны быть «от billing-1»: другой записей не держал.")
    live = made(ns, "hurry_live", dict)
    twice = [str(j.msg_id) for j in journal if live.get(str(j.msg_id)) == 0]
    expect(
        twice and len(twice) >= len(journal) - 1,  # the entry billing-1 was handling at the claim may go either way
        "Забранные записи billing-1 подтвердил сам (его XACK вернул 1): значит, спасатель забрал их уже после "
        "работы. Вызывайте его, пока пачка ещё в работе.",
    )
    expect(
        number(ns["hurry_taken_from_live"], "hurry_taken_from_live") == len(journal),
        "`hurry_taken_from_live` не совпадает с числом строк журнала.",
    )
    expect(client.xpending(stream, GROUP)["pending"] == 0, "В PEL что-то осталось: спасатель должен подтвердить своё.")
    return (
        f"Спасатель забрал {len(journal)} записей у живого billing-1, который ничего не ронял, и тот обработал их "
        "тоже — его XACK вернул 0. По журналу это не отличить от спасения упавших: min idle должен быть больше "
        "времени на пачку (COUNT × обработка), как в опыте ноутбука 02."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="04.1",
        title="Ваша реализация",
        needs=("my_impl",),
        verify=_verify_impl,
        nudge=(
            "Проверке нужна ваша реализация лабораторной 1: файл рядом с репозиторием и путь к нему."
        ),
        hint=(
            "Скопируйте `labs/lab1/starter.py` в `my_lab1.py` в корне репозитория, допишите функции по их "
            "докстрингам и укажите путь в `my_impl`. Проверка назовёт первую функцию и шаг, где что-то не "
            "так."
        ),
    ),
    Exercise(
        id="04.2",
        title="Подтвердить до работы",
        needs=("broken_pel", "broken_lost", "broken_done"),
        verify=_verify_ack_first,
        nudge=(
            "Что будет с записью, если XACK сделан раньше, чем работа, а воркер упал между ними?"
        ),
        hint=(
            "Функция-копия `consume_once`, в которой XACK стоит сразу после чтения, до обработки. После "
            "прогона сравните PEL группы и счётчики продюсера в стриме с тем, что обработчик успел "
            "сделать."
        ),
    ),
    Exercise(
        id="04.3",
        title="Спасатель торопится",
        needs=("hurry_journal", "hurry_taken_from_live", "hurry_live", "hurry_done"),
        verify=_verify_hurry,
        nudge=(
            "Спасатель с маленьким min idle забирает записи у живого, просто медленного консьюмера."
        ),
        hint=(
            "Запустите живую пачку, подождите чуть дольше min idle и вызовите `lab1.rescue_once` с min "
            "idle 50 мс; журнал спасателя — то, что он забрал у живого."
        ),
    ),
)
