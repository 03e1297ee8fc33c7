"""Exercise checks of notebook 08 (lab 3): ``check("08.1")`` ... ``check("08.3")``.

A lab run takes the better part of a minute, so the exercises take the lab's three lessons one at
a time, in seconds, on the notebook's own Redis (keys under ``P``) or on a throwaway pair of
servers; the whole lab stays for the terminal (the notebook says what to look at there). The
checks use only Redis and the student's own objects, nothing of the lab runner's internals:

- 08.1 «Дедуп в одной транзакции»: the student's ``charge_once(db, event_id, amount)`` is run by
  the check over deliveries it makes on ``P + "ex:ledger"`` (a redelivery and a producer re-send),
  and over a charge that fails half-way: one charge per event, no marker without its charge.
- 08.2 «WAIT вместо тихой потери»: the window of a graceful failover on a pair, with ``WAIT 1``
  after every ``XADD``; ``confirmed_ids``, ``unknown_ids``, ``missing_ids``.
- 08.3 «Пустой XPENDING ничего не доказывает»: an ack-first worker stopped half-way on
  ``P + "ex:ackfirst"`` with its ledger in the hash ``P + "ex:ackfirst:ledger"``; ``pel_now`` and
  ``acked_not_done``.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import closing
from typing import Any

import redis

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import client_of, id_set, named_stream, number, prefix_of, to_call
from labs.experiments.worker_procs import delivered_ids, pending_ids

GROUP = "billing"
EVENTS = ("e-1", "e-2", "e-3")


def _deliveries(client: redis.Redis, stream: str) -> list[dict[str, str]]:
    """Real deliveries: three events, a producer re-send of e-1 (new message id), a redelivery of e-2."""
    client.delete(stream)
    client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    for event_id in (*EVENTS, "e-1"):
        client.xadd(stream, {"event_id": event_id, "amount": "10.00"})
    reply: Any = client.xreadgroup(GROUP, "w-1", {stream: ">"}, count=10)
    delivered = [(str(msg_id), dict(fields)) for msg_id, fields in reply[0][1]]
    redelivered: Any = client.xclaim(stream, GROUP, "w-2", 0, [delivered[1][0]])  # the rescuer's redelivery
    return [fields for _, fields in delivered] + [dict(redelivered[0][1])]


def _charge(charge_once: Callable[..., object], db: sqlite3.Connection, event_id: str, amount: str) -> object:
    """The student's function on one delivery; whatever it raised becomes one line."""
    try:
        return charge_once(db, event_id, amount)
    except Exception as exc:
        raise Miss(f"`charge_once` упала на событии {event_id}: {type(exc).__name__}: {exc}.") from None


def _failed_charge(charge_once: Callable[..., object], db: sqlite3.Connection) -> None:
    """A charge that fails half-way (NOT NULL on the amount): an error is expected, a swallowed one is fine too."""
    try:
        charge_once(db, "e-broken", None)
    except sqlite3.Error:
        pass
    except Exception as exc:
        raise Miss(f"`charge_once` упала не ошибкой SQLite: {type(exc).__name__}: {exc}.") from None


def _verify_ledger(ns: Mapping[str, object]) -> str:
    """08.1: one charge per event through re-sends and redeliveries; a failed charge leaves no marker."""
    charge_once = ns["charge_once"]
    if not callable(charge_once):
        raise Miss("`charge_once` должна быть функцией `charge_once(db, event_id, amount)`.")
    deliveries = _deliveries(client_of(ns), prefix_of(ns) + "ex:ledger")
    with closing(sqlite3.connect(":memory:")) as db:
        to_call(ns["ledger_schema"])(db)
        answers = [_charge(charge_once, db, f["event_id"], f["amount"]) for f in deliveries]
        per_event = Counter(e for (e,) in db.execute("SELECT event_id FROM charges"))
        expect(
            all(per_event[e] <= 1 for e in EVENTS),
            "Событие списано дважды: повторная доставка и повторная отправка продюсера приходят с тем же `event_id` — "
            "его и надо проверять (`applied_events`), а не ID сообщения.",
        )
        expect(all(per_event[e] == 1 for e in EVENTS), "Не все события списаны: каждое должно списаться один раз.")
        expect(
            [bool(a) for a in answers] == [True, True, True, False, False],
            "`charge_once` должна вернуть True, когда списала, и False, когда событие уже было применено.",
        )
        _failed_charge(charge_once, db)  # NOT NULL: the charge fails after the marker
        marked = db.execute("SELECT COUNT(*) FROM applied_events WHERE event_id = 'e-broken'").fetchone()[0]
    expect(
        marked == 0,
        "Списание упало, а отметка «применено» осталась: повтор этого события теперь не спишет его никогда. Отметка "
        "и списание должны быть одной транзакцией (`with db:` вокруг обеих вставок, без `commit` между ними).",
    )
    return (
        "Одно списание на событие — и при повторной доставке, и при повторной отправке продюсера, — а упавшее "
        "списание не оставило отметки. Так устроена стратегия `sqlite`: эффект и «применено» в одной транзакции, "
        "поэтому ей не страшен failover Redis, который теряет метку `SET NX` вместе с `XACK`."
    )


def _verify_wait(ns: Mapping[str, object]) -> str:
    """08.2: WAIT 1 = 1 is never lost; everything the failover lost was marked unknown."""
    confirmed, unknown, missing = (id_set(ns[n], n) for n in ("confirmed_ids", "unknown_ids", "missing_ids"))
    expect(not confirmed & unknown, "Одна запись не может быть и подтверждённой, и с неизвестным исходом.")
    expect(
        confirmed,
        "Ни одной подтверждённой записи: `WAIT` не дождался реплики даже при живой связи. Дождитесь связи перед "
        "записями и дайте `WAIT` хотя бы 100 мс.",
    )
    expect(unknown, "Нет записей с неизвестным исходом: пишите в старый мастер и **после** продвижения реплики.")
    expect(missing <= confirmed | unknown, "В `missing_ids` есть ID, которых продюсер не отправлял.")
    expect(
        missing,
        "Ничего не пропало: сверяйте с **новым** мастером после того, как старый стал его репликой и "
        "досинхронизировался (`REPLICAOF`, `master_link_status:up`).",
    )
    expect(
        not missing & confirmed,
        "Пропала запись, для которой `WAIT 1` вернул 1: так не бывает, если `WAIT` спрашивать после **каждого** `XADD` "
        "на том же соединении — проверьте порядок.",
    )
    survived = len(unknown - missing)
    arrived = f", а {survived} всё-таки дошли (WAIT не дождался и живой реплики)" if survived else ""
    return (
        f"Подтверждённых {len(confirmed)} — все на новом мастере; из {len(unknown)} «неизвестных» пропали "
        f"{len(missing)}{arrived}. "
        "`WAIT` не спас записи окна, но превратил тихую потерю в известный список: продюсер лабораторной "
        "с `WAIT` переотправит их с тем же `event_id`, а если запись всё-таки дошла, дубль уберёт дедуп по "
        "`event_id` (задание 1)."
    )


def _verify_ack_first(ns: Mapping[str, object]) -> str:
    """08.3: an empty PEL, and the ledger vs what left the PEL names what was acked and never done."""
    client, stream = named_stream(ns, "ex:ackfirst")
    pending = int(client.xpending(stream, GROUP)["pending"])
    expect(number(ns["pel_now"], "pel_now") == pending, "`pel_now` не совпадает с `XPENDING` группы `billing`.")
    charged = {str(v) for v in client.hvals(stream + ":ledger")}
    truth = delivered_ids(client, stream, GROUP) - pending_ids(client, stream, GROUP) - charged
    expect(
        id_set(ns["acked_not_done"], "acked_not_done") == truth,
        "`acked_not_done` не то. Покинули PEL — выданные группе (до `last-delivered-id` из `XINFO GROUPS`) и не "
        "висящие в `XPENDING`; из них вычтите те, что есть в леджере (значения хэша — ID сообщений).",
    )
    return (
        f"XPENDING пуст ({pending}), а {len(truth)} подтверждённых событий так и не списаны: воркер подтверждал до "
        "работы и ушёл по SIGTERM. Это ловит только сверка леджера с тем, что покинуло PEL, — так считает проверка "
        "лабораторной «подтверждено, но не сделано»."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="08.1",
        title="Дедуп в одной транзакции",
        needs=("charge_once", "ledger_schema"),
        verify=_verify_ledger,
        nudge=(
            "Метка «событие применено» и само списание должны появиться вместе или не появиться вовсе."
        ),
        hint=(
            "Одна транзакция SQLite (`with db:`): вставка метки с игнорированием повтора; списание — "
            "только если метка действительно вставилась (`rowcount`); верните, была ли вставка."
        ),
    ),
    Exercise(
        id="08.2",
        title="WAIT вместо тихой потери",
        needs=("confirmed_ids", "unknown_ids", "missing_ids"),
        verify=_verify_wait,
        nudge=(
            "Подтверждённая записью на мастере операция может не дойти до реплики; WAIT говорит, дошла "
            "ли."
        ),
        hint=(
            "После каждой записи на старом мастере — WAIT на одну реплику с коротким таймаутом, и по "
            "ответу раскладывайте ID на подтверждённые и неизвестные; затем продвиньте реплику и "
            "разжалуйте старый мастер (REPLICAOF) и посмотрите XRANGE на новом."
        ),
    ),
    Exercise(
        id="08.3",
        title="Пустой XPENDING ничего не доказывает",
        needs=("pel_now", "acked_not_done"),
        verify=_verify_ack_first,
        nudge=(
            "XPENDING показывает только выданные и не подтверждённые записи; невыданные в нём не видны "
            "вовсе."
        ),
        hint=(
            "Граница выданного — `last-delivered-id` группы в XINFO GROUPS; выданные — XRANGE до неё, "
            "висящие — расширенный XPENDING, списанные — значения хэша леджера."
        ),
    ),
)
