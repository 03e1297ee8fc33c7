"""The brokers quiz (notebook 11): keys checked against the notebook's own run (``rows``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import redis

from labs.panels.quiz import Check, Question, Quiz

# A row of the comparison as this quiz reads it (labs.compare.scenarios.Row is one): panels sit below
# compare, so the quiz names only the mapping it reads, never compare's own type.
Row = Mapping[str, object]

TITLE = "Проверь себя: брокеры рядом"


def _holds(answer: int, holds: bool) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        return answer if holds else -1

    return check


def _row(rows: Sequence[Row], broker: str, case: str) -> Mapping[str, object]:
    for r in rows:
        if r.get("broker") == broker and r.get("case") == case and "error" not in r:
            return r
    return {}


def _num(r: Row, key: str) -> float:
    return float(str(r.get(key) or 0))


def _rate(r: Row) -> float:
    return _num(r, "publish_per_s")


def _window_factors(rows: Sequence[Row]) -> list[float]:
    """Per row: its best windowed publish rate over its one-in-flight rate."""
    out = []
    for broker in dict.fromkeys(r.get("broker") for r in rows):
        sweep = [r for r in rows if r.get("broker") == broker and str(r.get("case", "")).startswith("window-")
                 and "error" not in r]
        one = [_rate(r) for r in sweep if r.get("case") == "window-1"]
        best = max((_rate(r) for r in sweep if r.get("case") != "window-1"), default=0.0)
        if one and one[0]:
            out.append(best / one[0])
    return out


def quiz(*, rows: Sequence[Row], max_attempts: int) -> Quiz:
    poison = [r for r in rows if r.get("case") == "poison" and "error" not in r]
    crash = [r for r in rows if r.get("case") == "consumer-kill" and "error" not in r]
    nats_kill = _row(rows, "nats", "leader-kill")
    windows = _window_factors(rows)
    questions = [
        Question("Консьюмер убит kill -9 между списанием и ack. Что сделал ledger с повторной доставкой?",
                 ("Списал второй раз", "Поглотил: applied_events уже знает event_id, второго списания нет",
                  "Брокер не доставил сообщение повторно"), 1,
                 "Списание и строка applied_events коммитятся одной транзакцией; повтор виден как absorbed.",
                 check=_holds(1, bool(crash) and all(
                     _num(r, "charged_twice") == 0 and _num(r, "duplicates_absorbed") >= 1 for r in crash))),
        Question(f"Сколько доставок получило ядовитое сообщение до DLQ при max_attempts = {max_attempts}?",
                 ("1", str(max_attempts), "бесконечно"), 1,
                 "Счёт доставок ведёт каждый брокер (times_delivered, x-delivery-count, num_delivered). "
                 "Переносит в мёртвые письма после N-й RabbitMQ сам (x-delivery-limit = N − 1: он считает "
                 "возвраты), в Redis и NATS — код консьюмера на N-й доставке.",
                 check=_holds(1, bool(poison) and all(_num(r, "poison_attempts") == max_attempts for r in poison))),
        Question(f"{nats_kill.get('server', 'NATS')}, R3: kill -9 лидера стрима под нагрузкой. "
                 "Что с подтверждёнными публикациями?",
                 ("Часть потеряна", "Все на месте: ack пришёл после записи на большинстве",
                  "Все на месте, потому что NATS делает fsync перед ack"), 1,
                 f"Спасла репликация, не диск: fsync здесь — {nats_kill.get('fsync', 'раз в 2 минуты')}. "
                 "Отключение питания всех трёх узлов — другой опыт, его этот прогон не показывает.",
                 check=_holds(1, bool(nats_kill) and nats_kill.get("lost") == 0)),
        Question("Что измеряет строка «окно 1» (одно событие в полёте)?",
                 ("Пропускную способность брокера", "Задержку подтверждённой публикации: круговой путь «XADD/"
                  "publish → подтверждение»", "Скорость консьюмера"), 1,
                 "С окном публикаций в секунду в разы больше у каждого брокера: окно 1 — это задержка, "
                 "пропускную способность даёт окно, как советует каждый вендор.",
                 check=_holds(1, bool(windows) and all(r > 1 for r in windows))),
    ]
    return Quiz(questions, title=TITLE)
