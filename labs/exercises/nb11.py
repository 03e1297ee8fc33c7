"""Exercise checks of notebook 11 (the brokers compared): ``check("11.1")``, ``check("11.2")``.

The notebook's run cell keeps its rows in ``rows`` (a list of dicts, one per row and case, see
:mod:`labs.compare.scenarios`). The checks answer from the settings, and back from those rows:

- 11.1 «Кто не теряет подтверждённое»: ``no_loss_by_settings``, the set of row names whose confirm
  comes only once another node has a copy (a quorum, or ``WAIT 1``), so that in *this* topology a
  confirmed event survives a kill -9 of the leader. (``WAIT`` is best effort in general: Sentinel may
  promote a replica without the write; a quorum is a guarantee.) The check compares with the rows
  that ran and then reads the run: each row named must show ``lost == 0`` at its leader kill.
- 11.2 «Где очередь мёртвых писем сама»: ``own_dlq``, the set of row names whose *broker* moves a
  message to the dead letters after the delivery limit, with no consumer code. The check reads who
  moved the poison message in the run (``dead_lettered_by``: the consumer's tally of its own moves
  against the broker's dead-letter queue), so it can tell the broker's move from the consumer's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import of_kind

REPLICATED_BEFORE_CONFIRM = frozenset({"redis+WAIT", "redis+WAIT+always", "nats", "rabbitmq"})
# The rows notebook 11 runs (its KINDS): what 11.1 is judged against when no run filled ``rows`` yet.
NOTEBOOK_ROWS = frozenset({"redis", "redis+WAIT", "rabbitmq", "nats"})
BROKER_DLQ = frozenset({"rabbitmq"})  # x-delivery-limit + DLX; JetStream stops at MaxDeliver; Redis has none
SETUP = ("rows",)  # [] from the first cell until the run cell fills it (the edition test runs no brokers)


def _rows(ns: Mapping[str, object], case: str) -> dict[str, dict[str, object]]:
    rows = of_kind(ns.get("rows") or [], (list, tuple), "rows", "списком строк прогона (его заполняет ячейка прогона)")
    return {r["broker"]: r for r in rows if r.get("case") == case and "error" not in r}


def _as_set(value: object, name: str) -> set[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise Miss(f"{name} — это множество имён строк, например {{'nats'}}, а не {type(value).__name__}.")
    return {str(v) for v in value}


def _verify_no_loss(ns: Mapping[str, object]) -> str:
    chosen = _as_set(ns["no_loss_by_settings"], "no_loss_by_settings")
    measured = _rows(ns, "leader-kill")
    expect("redis" not in chosen, "Строка redis подтверждает XADD до того, как реплика его получила "
                                  "(репликация асинхронная): kill -9 мастера может унести подтверждённое.")
    extra = chosen - REPLICATED_BEFORE_CONFIRM
    expect(not extra, f"Таких строк в сравнении нет или они подтверждают без копии: {sorted(extra)}.")
    ran = set(measured) or NOTEBOOK_ROWS
    missing = (REPLICATED_BEFORE_CONFIRM & ran) - chosen
    expect(not missing, f"Выбрано не всё: ещё {len(missing)} из строк прогона подтверждают запись только тогда, "
                        "когда у неё есть копия на другом узле. Прочитайте колонку «что значит «да»».")
    for name in sorted(chosen & set(measured)):
        expect(measured[name]["lost"] == 0, f"В прогоне {name} потерял {measured[name]['lost']} подтверждённых: "
                                             "настройки обещали иное — посмотрите durability этой строки.")
    return (f"{sorted(chosen)} подтверждают запись, когда у неё уже есть копия, и прогон это показал "
            f"(lost = 0 у {sorted(chosen & set(measured))}). Для WAIT это верно в этой топологии: в общем случае "
            "WAIT — best effort (Sentinel может повысить реплику без записи), кворум — гарантия. "
            "redis без WAIT может потерять хвост при failover.")


def _verify_own_dlq(ns: Mapping[str, object]) -> str:
    chosen = _as_set(ns["own_dlq"], "own_dlq")
    poison = _rows(ns, "poison")
    moved_by = {name: r.get("dead_lettered_by") for name, r in poison.items()}
    expect("nats" not in chosen, "JetStream после MaxDeliver просто перестаёт доставлять (и шлёт advisory); "
                                 "в <stream>-dlq письмо кладёт наш консьюмер.")
    expect(not chosen & {"redis", "redis+WAIT", "redis+WAIT+always"},
           "В Redis Streams мёртвые письма — это XADD в <stream>:dlq из Lua-скрипта воркера, не сам Redis.")
    expect(chosen == set(BROKER_DLQ), "Посмотрите колонку «перенёс» в таблице прогона: у какой строки письмо "
                                      "перенёс брокер, а не консьюмер?")
    for name in sorted(chosen & set(moved_by)):
        expect(moved_by[name] == "broker", f"В прогоне у {name} письмо перенёс {moved_by[name]}, а не брокер: "
                                           "настройки обещали иное — посмотрите колонку «перенёс».")
    attempts = {name: poison[name].get("poison_attempts") for name in sorted(chosen & set(poison))}
    return (f"{sorted(chosen)}: письмо перенёс брокер (quorum queue, x-delivery-limit = N − 1 и DLX), консьюмер "
            f"только возвращал его в очередь; доставок в прогоне: {attempts}.")


EXERCISES: tuple[Exercise, ...] = (
    Exercise(id="11.1", title="Кто не теряет подтверждённое", needs=("no_loss_by_settings",), setup=SETUP,
             verify=_verify_no_loss,
             nudge="Подтверждение — это обещание. Спросите про каждую строку: кто ещё, кроме лидера, "
                   "хранит запись в момент, когда клиент услышал «да»?",
             hint="Смотрите колонку «что значит «да»» в таблице надёжности: где подтверждение ждёт копии на "
                  "другом узле (кворум, WAIT 1)?"),
    Exercise(id="11.2", title="Где очередь мёртвых писем сама", needs=("own_dlq",), setup=SETUP,
             verify=_verify_own_dlq,
             nudge="Мёртвое письмо появляется после N неудачных попыток. Кто в каждой строке ведёт этот "
                   "счёт и кто делает перенос: брокер или ваш код?",
             hint="Колонка «перенёс» в таблице прогона: broker — брокер сам, consumer — код консьюмера."),
)
