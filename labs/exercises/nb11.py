"""Exercise checks of notebook 11 (the brokers compared): ``check("11.1")``, ``check("11.2")``.

The notebook's third code cell runs the cases and keeps their rows in ``rows`` (a list of dicts, one per
broker and case, see :mod:`labs.compare.scenarios`). The checks answer from the settings, and
back from those rows where the namespace has them:

- 11.1 «Кто не теряет подтверждённое»: ``no_loss_by_settings``, the set of row names (``redis``,
  ``redis+WAIT``, ``nats``, ``rabbitmq``) whose settings guarantee that a confirmed event survives
  a kill -9 of the leader (the confirm comes only once a replica has it). The check compares with
  the settings and then reads the run: each row named must show ``lost == 0`` at its leader kill.
- 11.2 «Где очередь мёртвых писем сама»: ``own_dlq``, the set of row names whose *broker* moves a
  message to the dead letters by itself after the delivery limit (without the consumer publishing
  it). The check reads the poison rows: each named row dead-lettered after ``max_attempts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import of_kind

REPLICATED_BEFORE_CONFIRM = frozenset({"redis+WAIT", "nats", "rabbitmq"})
BROKER_DLQ = frozenset({"rabbitmq"})  # x-delivery-limit + DLX; JetStream stops at MaxDeliver; Redis has none
SETUP = ("rows",)  # [] from the first cell until the run cell fills it (the edition test runs no brokers)


def _rows(ns: Mapping[str, object], case: str) -> dict[str, dict[str, object]]:
    rows = of_kind(ns.get("rows") or [], (list, tuple), "rows", "списком строк прогона (его заполняет третья ячейка)")
    return {r["broker"]: r for r in rows if r.get("case") == case and "error" not in r}


def _as_set(value: object, name: str) -> set[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise Miss(f"{name} — это множество имён строк, например {{'nats'}}, а не {type(value).__name__}.")
    return {str(v) for v in value}


def _verify_no_loss(ns: Mapping[str, object]) -> str:
    chosen = _as_set(ns["no_loss_by_settings"], "no_loss_by_settings")
    expect("redis" not in chosen, "Строка redis подтверждает XADD до того, как реплика его получила "
                                  "(репликация асинхронная): kill -9 мастера может унести подтверждённое.")
    missing = REPLICATED_BEFORE_CONFIRM - chosen
    expect(not missing, f"Не хватает {sorted(missing)}: и у них подтверждение приходит только после копии "
                        "на большинстве (или на реплике — WAIT 1).")
    expect(chosen <= set(REPLICATED_BEFORE_CONFIRM), f"Лишние имена: {sorted(chosen - REPLICATED_BEFORE_CONFIRM)}.")
    measured = _rows(ns, "leader-kill")
    for name in sorted(chosen & set(measured)):
        expect(measured[name]["lost"] == 0, f"В прогоне {name} потерял {measured[name]['lost']} подтверждённых: "
                                             "настройки обещали иное — посмотрите durability этой строки.")
    return (f"Верно: {sorted(chosen)} подтверждают запись, когда у неё уже есть копия, и прогон это показал "
            f"(lost = 0 у {sorted(chosen & set(measured))}). redis без WAIT может потерять хвост при failover.")


def _verify_own_dlq(ns: Mapping[str, object]) -> str:
    chosen = _as_set(ns["own_dlq"], "own_dlq")
    expect("nats" not in chosen, "JetStream после MaxDeliver просто перестаёт доставлять (и шлёт advisory); "
                                 "в <stream>-dlq письмо кладёт наш консьюмер.")
    expect("redis" not in chosen and "redis+WAIT" not in chosen,
           "В Redis Streams мёртвые письма — это XADD в <stream>:dlq из Lua-скрипта воркера, не сам Redis.")
    expect(chosen == set(BROKER_DLQ), "Одна строка отправляет в DLX сама: quorum queue с x-delivery-limit.")
    poison = _rows(ns, "poison")
    if "rabbitmq" in poison:
        expect(poison["rabbitmq"]["poison_dead_lettered"], "В прогоне RabbitMQ ядовитое сообщение не дошло до DLQ.")
    return "Верно: только RabbitMQ (quorum queue, x-delivery-limit + DLX) перекладывает письмо в DLQ сам."


EXERCISES: tuple[Exercise, ...] = (
    Exercise(id="11.1", title="Кто не теряет подтверждённое", needs=("no_loss_by_settings",), setup=SETUP,
             verify=_verify_no_loss,
             nudge="Подтверждение — это обещание. Спросите про каждую строку: кто ещё, кроме лидера, "
                   "хранит запись в момент, когда клиент услышал «да»?",
             hint="Смотрите колонку durability: где подтверждение ждёт копии на другом узле (кворум, WAIT 1)?"),
    Exercise(id="11.2", title="Где очередь мёртвых писем сама", needs=("own_dlq",), setup=SETUP,
             verify=_verify_own_dlq,
             nudge="Мёртвое письмо появляется после N неудачных попыток. Кто в каждой строке ведёт этот "
                   "счёт и кто делает перенос: брокер или ваш код?",
             hint="Чей брокер сам считает доставки и сам перекладывает письмо после лимита, а где это делает код?"),
)
