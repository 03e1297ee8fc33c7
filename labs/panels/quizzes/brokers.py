"""The brokers quiz (notebook 11): keys checked against the notebook's own run (``rows``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import redis

from labs.panels.quiz import Check, Question, Quiz

if TYPE_CHECKING:
    from labs.compare.scenarios import Row

TITLE = "Проверь себя: брокеры рядом"


def _holds(answer: int, holds: bool) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        return answer if holds else -1

    return check


def _row(rows: list[Row], broker: str, case: str) -> Mapping[str, object]:
    for r in rows:
        if r.get("broker") == broker and r.get("case") == case and "error" not in r:
            return r
    return {}


def quiz(*, rows: list[Row], max_attempts: int) -> Quiz:
    poison = [r for r in rows if r.get("case") == "poison" and "error" not in r]
    crash = [r for r in rows if r.get("case") == "consumer-kill" and "error" not in r]
    nats_kill = _row(rows, "nats", "leader-kill")
    questions = [
        Question("Консьюмер убит kill -9 между списанием и ack. Что сделал ledger с повторной доставкой?",
                 ("Списал второй раз", "Поглотил: applied_events уже знает event_id, второго списания нет",
                  "Брокер не доставил сообщение повторно"), 1,
                 "Списание и строка applied_events коммитятся одной транзакцией; повтор виден как absorbed.",
                 check=_holds(1, bool(crash) and all(r["charged_twice"] == 0 and r["duplicates_absorbed"] >= 1
                                                     for r in crash))),
        Question(f"Сколько доставок получило ядовитое сообщение до DLQ при max_attempts = {max_attempts}?",
                 ("1", str(max_attempts), "бесконечно"), 1,
                 "Каждая строка ведёт счёт доставок (delivery count, x-delivery-count, num_delivered) "
                 "и отправляет в мёртвые письма на последней.",
                 check=_holds(1, bool(poison) and all(r["poison_attempts"] == max_attempts for r in poison))),
        Question("NATS 2.9, R3: kill -9 лидера стрима под нагрузкой. Что с подтверждёнными публикациями?",
                 ("Часть потеряна", "Все на месте: ack пришёл после записи на большинстве",
                  "Все на месте, потому что NATS делает fsync перед ack"), 1,
                 "Спасла репликация, не диск: 2.9 делает fsync раз в 2 минуты. Отключение питания всех трёх "
                 "узлов — другой опыт, его этот прогон не показывает.",
                 check=_holds(1, bool(nats_kill) and nats_kill.get("lost") == 0)),
    ]
    return Quiz(questions, title=TITLE)
