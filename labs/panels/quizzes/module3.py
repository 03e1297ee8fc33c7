"""The module 3 quiz (notebook 08): the read loop, claiming, idempotency, shutdown, failover.

``quiz(master_url=..., sqlite_duplicates=..., window=...)`` builds it. Questions about Redis
behaviour are checked on a real Redis (a few commands each; the socket timeout one by
:func:`labs.experiments.read_loop.block_past_socket_timeout` against ``master_url``); the
questions about the lab are checked against the notebook's own results:

- ``sqlite_duplicates``: the duplicates the lab counted over its ``sqlite`` runs;
- ``window``: the notebook's failover-window experiment (:class:`FailoverWindow`): writes the
  old master acknowledged after the replica was promoted, what ``WAIT`` said of them, and how
  many were left on each server once the old master resynced as a replica.

Together they check the "exactly once" answer: ``applied_events`` gives at most one effect
(no duplicates in the lab), and exactly one only for what Redis kept (the window's
acknowledged writes are gone from both servers, so those events are never charged at all).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from labs import replies
from labs.experiments.read_loop import block_past_socket_timeout
from labs.panels.quiz import Check, Question, Quiz

TITLE = "Проверь себя: модуль 3"


@dataclass(frozen=True, kw_only=True)
class FailoverWindow:
    """The failover-window experiment's numbers (notebook 08, section 7)."""

    acknowledged: int  # XADDs the old master acknowledged after the promotion
    on_old_master: int  # of them, present on the old master before it was demoted
    wait_replicas: int  # what WAIT 1 returned after them
    after_resync: tuple[int, int]  # of them, on the new master and on the old one after the resync

    def __post_init__(self) -> None:
        if self.acknowledged < 1:
            raise ValueError("the window experiment must have acknowledged at least one write")

    @property
    def lost(self) -> bool:
        """Every acknowledged write of the window is gone from both servers."""
        return self.after_resync == (0, 0)


def _empty_block(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    reply = c.xreadgroup("g", "c", {key + "s": ">"}, count=1, block=50)
    return 1 if not reply else 0


def _socket_timeout(master_url: str) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        c.xgroup_create(key + "s", "billing", id="0", mkstream=True)
        outcome = block_past_socket_timeout(master_url, key + "s", socket_timeout_s=0.2, block_ms=400)
        return 2 if outcome == "TimeoutError" else 0

    return check


def _delconsumer(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    c.xadd(key + "s", {"n": 1})
    c.xreadgroup("g", "dead", {key + "s": ">"})
    c.xgroup_delconsumer(key + "s", "g", "dead")
    return 2 if c.xpending(key + "s", "g")["pending"] == 0 else 1


def _steal_live(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    c.xadd(key + "s", {"n": 1})
    c.xreadgroup("g", "alive", {key + "s": ">"})
    _, claimed, _ = c.xautoclaim(key + "s", "g", "rescuer", min_idle_time=0)
    return 1 if claimed else 0


def _delivery_counter(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    msg_id = c.xadd(key + "s", {"n": 1})
    c.xreadgroup("g", "a", {key + "s": ">"})
    c.xclaim(key + "s", "g", "b", 0, [msg_id])
    return 0 if c.xpending_range(key + "s", "g", "-", "+", 1)[0]["times_delivered"] == 2 else 1


def _setnx(c: redis.Redis, key: str) -> int:
    c.setnx(key + "m", 1)
    return 1 if c.ttl(key + "m") == -1 else 0


def _glue(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    c.xadd(key + "s", {"n": 1})
    c.xreadgroup("g", "billing-1", {key + "s": ">"})  # the old process, then it dies
    again = replies.read(c.xreadgroup("g", "billing-1", {key + "s": "0"}))  # the restarted one, same name
    return 1 if again and again[0][1] else 0


def _sigterm_pel(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    for i in range(3):
        c.xadd(key + "s", {"n": i})
    ((_, batch),) = replies.read(c.xreadgroup("g", "billing-2", {key + "s": ">"}, count=3))
    c.xack(key + "s", "g", batch[0][0])  # done and acked before the exit; two left in its PEL
    _, claimed, _ = c.xautoclaim(key + "s", "g", "rescuer", min_idle_time=0)
    return 1 if [m for m, _ in claimed] == [m for m, _ in batch[1:]] else 0


def _applied_events(sqlite_duplicates: int, window: FailoverWindow) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        if sqlite_duplicates > 0:
            return 2
        return 1 if window.lost else 0

    return check


def _wait_zero(window: FailoverWindow) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        return 1 if (window.wait_replicas, window.on_old_master) == (0, window.acknowledged) else 0

    return check


def _window_writes(window: FailoverWindow) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        return 1 if window.lost else 0

    return check


def _read_loop_questions(master_url: str) -> list[Question]:
    return [
        Question("Что возвращает XREADGROUP ... BLOCK 2000, если за 2 с ничего не пришло?",
                 ("Ошибку, которую надо обработать бэкоффом", "Пустой ответ: это норма, читаем дальше",
                  "Ничего: вызов висит, пока не придёт сообщение"), 1,
                 "По таймауту BLOCK Redis отвечает nil; redis-py отдаёт пустой список, go-redis — redis.Nil. "
                 "Считать это сбоем — ложная тревога и лишняя пауза.", check=_empty_block),
        Question("Клиент с socket_timeout 0,2 с делает XREADGROUP BLOCK 400 на пустом стриме. Что будет?",
                 ("Пустой ответ через 400 мс", "Redis обрежет BLOCK до таймаута клиента",
                  "TimeoutError на стороне клиента, хотя Redis здоров"), 2,
                 "Сервер молчит весь BLOCK, и клиент принимает молчание за мёртвый сокет. Таймаут сокета "
                 "должен быть больше BLOCK с запасом.", check=_socket_timeout(master_url)),
        Question("Что делает XGROUP DELCONSUMER с pending-записями удаляемого консьюмера?",
                 ("Отказывается удалять консьюмера", "Передаёт их другому консьюмеру группы",
                  "Удаляет их из PEL: никто их больше не переобработает"), 2,
                 "Поэтому сначала спасатель забирает записи, а удаляют только консьюмеров, которые давно "
                 "молчат и ничего не держат.", check=_delconsumer),
        Question("Может ли XAUTOCLAIM забрать запись у живого, но медленного консьюмера?",
                 ("Нет, Redis проверяет, что владелец жив", "Да, если запись простаивает дольше min idle",
                  "Только с флагом FORCE"), 1,
                 "Redis знает только idle записи. Поэтому min idle берут с запасом над самой долгой "
                 "обработкой (в курсе: обработка до 40 с — min idle 2 мин), а обработчик делают идемпотентным.",
                 check=_steal_live),
        Question("Запись прочитали, а потом её забрал XCLAIM. Чему равен её счётчик доставок?",
                 ("2", "1", "0: счётчик считает только XACK"), 0,
                 "Каждая выдача (XREADGROUP, перечитывание PEL, XCLAIM/XAUTOCLAIM) увеличивает "
                 "times_delivered. На нём и строится DLQ после N попыток — отдельный INCR не нужен.",
                 check=_delivery_counter),
        Question("В redis-py вызвали r.setnx(key, 1). Какой TTL у метки?",
                 ("Тот, что задан в настройках клиента", "Никакого: метка вечная (TTL -1)", "Ошибка: нужен TTL"), 1,
                 "setnx — голая команда SETNX без срока. Нужна одна атомарная команда: "
                 "r.set(key, 1, nx=True, ex=ttl).", check=_setnx),
        Question("Процесс billing-1 прочитал запись и умер; его перезапустили с тем же именем. "
                 "Что вернёт наследнику XREADGROUP ... 0?",
                 ("Ничего: PEL привязана к процессу", "Запись мёртвого процесса: их PEL склеились",
                  "Ошибку NOGROUP"), 1,
                 "PEL привязана к имени, а не к процессу. С именами host-pid наследник её не увидит — "
                 "запись вернёт только спасатель.", check=_glue),
        Question("Спасатель вызывает XAUTOCLAIM каждый тик с 0-0 и COUNT 32. Чем это опасно?",
                 ("Ничем, 0-0 — рекомендуемое начало", "Он смотрит только первые 320 записей PEL и может "
                  "никогда не дойти до зависших за ними", "Redis вернёт ошибку без курсора"), 1,
                 "Храните курсор между вызовами и возвращайтесь к 0-0, только когда XAUTOCLAIM сам его вернул."),
    ]


def _lab_questions(sqlite_duplicates: int, window: FailoverWindow) -> list[Question]:
    return [
        Question("Эффект списания и строка applied_events пишутся в одной транзакции SQLite. Что это даёт "
                 "при kill -9 воркера и failover Redis?",
                 ("Ровно один эффект на каждое событие, на которое продюсер получил ID",
                  "Не больше одного эффекта на событие; ровно один — только для событий, которые Redis сохранил",
                  "Ничего: повторная доставка всё равно спишет дважды"), 1,
                 "Транзакция связывает эффект и отметку «применено»: повтор не спишет дважды (у sqlite в "
                 "лабораторной 0 дублей), а метка в Redis теряется при failover вместе с XACK. Но запись, которую "
                 "Redis потерял при failover, не доставят вовсе (опыт с окном выше): её закрывают WAIT и продюсер, "
                 "который переотправляет неподтверждённое с тем же event_id.",
                 check=_applied_events(sqlite_duplicates, window)),
        Question("Зачем спасатель один на группу?",
                 ("Redis запрещает два XAUTOCLAIM одновременно", "Иначе спасатели отбирают записи друг у "
                  "друга и плодят дубли", "Чтобы не превысить maxclients"), 1,
                 "Выбирают его арендой: SET lease me NX PX срок, продление каждый тик; умер — аренда истекла."),
        Question("billing-2 получил SIGTERM, доделал одну запись из трёх прочитанных, подтвердил её, написал "
                 "drain complete и вышел. Что с двумя другими?",
                 ("Потеряны: надо было подтвердить их перед выходом", "Лежат в PEL и вернутся в работу: после "
                  "рестарта или через спасателя", "Redis вернёт их в стрим как новые"), 1,
                 "Не подтверждённое — не потерянное. XACK «на глаз» при остановке как раз и теряет работу навсегда.",
                 check=_sigterm_pel),
        Question("XADD ответил ID, а WAIT 1 200 вернул 0. Что это значит?",
                 ("Redis откатил запись", "Запись есть на мастере, но ни одна реплика её не подтвердила: исход "
                  "при failover неизвестен", "Запись не сохранилась"), 1,
                 "WAIT ничего не откатывает, он только сообщает. Переотправка такого события может дать дубль — "
                 "отсекайте его дедупом по event_id.",
                 check=_wait_zero(window)),
        Question("Sentinel продвинул реплику, а старый мастер, которого ещё не перевели в реплики, принимал XADD "
                 "от клиентов, не заметивших переключения. Что станет с этими подтверждёнными записями, когда "
                 "Sentinel сделает его репликой?",
                 ("Доедут до нового мастера", "Пропадут: при синхронизации старый мастер заменит свои данные данными "
                  "нового", "Останутся только на старом мастере"), 1,
                 "Это окно вежливого failover: Sentinel перенастраивает старый мастер не сразу, и клиент, который "
                 "не рвёт соединения по +switch-master, всё это время пишет в него. При kill -9 окно — лишь "
                 "репликационный лаг. Спасает только WAIT с переотправкой неизвестных исходов.",
                 check=_window_writes(window)),
    ]


def quiz(*, master_url: str, sqlite_duplicates: int, window: FailoverWindow) -> Quiz:
    """The quiz; ``master_url`` is the current master (after the lab's failover), the rest the notebook's results."""
    return Quiz(_read_loop_questions(master_url) + _lab_questions(sqlite_duplicates, window), title=TITLE)
