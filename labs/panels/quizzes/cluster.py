"""The Redis Cluster quiz (notebook 09): slots, hash tags, sharded streams, a master's death, the lost tail.

``quiz(facts=ClusterFacts(...))`` builds it. The client given to :meth:`~labs.panels.quiz.Quiz.verify`
is a ``redis.cluster.RedisCluster``: the questions about Redis behaviour run their commands on
the cluster (a raw command to one node where the point is what *the server* answers, since
redis-py refuses a cross-slot command before sending it). The questions about the notebook's
experiments are checked against its measured :class:`ClusterFacts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisClusterException, ResponseError

from labs.panels.quiz import Check, Question, Quiz

TITLE = "Проверь себя: Redis Cluster"
PROMOTION_STALL_S = 1.0  # a stall this long is "waited for the promotion"; shorter is "kept going"


@dataclass(frozen=True, kw_only=True)
class ClusterFacts:
    """What notebook 09 measured."""

    resplit_violations: int  # the order's events charged out of order after 3 -> 4 shards
    killed_gap_s: float  # kill -9 of a master: its shard's longest pause in charging
    others_refused_no: int  # ... CLUSTERDOWN replies the other shards' masters sent, cluster-require-full-coverage no
    others_refused_yes: int  # ... and with yes
    others_gap_yes_s: float  # ... the other shards' longest pause in charging with yes
    tail_written: int  # writes the master acknowledged after its replica's link was cut
    tail_survived: int  # of them, on the promoted replica
    tail_wait: int  # what WAIT 1 said of them


def _node_of(c: Any, key: str) -> Any:
    """A plain client of the master that serves ``key`` (to send a command as it is)."""
    return c.get_redis_connection(c.get_node_from_key(key))


def _two_slots_one_master(c: Any, key: str) -> tuple[str, str]:
    """Two stream keys in different slots served by the same master."""
    first = f"{key}s:{{0}}"
    node = c.get_node_from_key(first).name
    second = next(k for i in range(1, 200) if (k := f"{key}s:{{{i}}}") and c.get_node_from_key(k).name == node
                  and c.keyslot(k) != c.keyslot(first))
    return first, second


def _crossslot(c: Any, key: str) -> int:
    a, b = _two_slots_one_master(c, key)
    c.xadd(a, {"n": 1})
    c.xadd(b, {"n": 1})
    try:
        _node_of(c, a).execute_command("XREAD", "STREAMS", a, b, "0", "0")
    except ResponseError as exc:
        return 1 if "slot" in str(exc).lower() else 0  # CROSSSLOT, though one master holds both
    except RedisClusterException:
        return 1
    return 0


def _one_master(c: Any, key: str) -> int:
    stream = key + "orders"
    for i in range(30):
        c.xadd(stream, {"n": i})
    node = _node_of(c, stream)
    slot = c.keyslot(stream)
    whole = int(node.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)) == 1 and node.xlen(stream) == 30
    return 0 if whole else 1


def _same_slot(c: Any, key: str) -> int:
    options = ("orders:7:dlq", "orders:{7}:dlq", "{orders}:7")
    target = c.keyslot("orders:{7}")
    same = [i for i, k in enumerate(options) if c.keyslot(k) == target]
    return same[0] if len(same) == 1 else -1


def _non_local_key(c: Any, key: str) -> int:
    a, _ = _two_slots_one_master(c, key)
    node = c.get_node_from_key(a).name
    far = next(k for i in range(200) if c.get_node_from_key(k := f"{key}f:{{{i}}}").name != node)
    try:
        _node_of(c, a).execute_command("EVAL", f"return redis.call('XLEN', '{far}')", 1, a)
    except ResponseError as exc:
        return 2 if "non local key" in str(exc) else 0
    return 0


def _resplit(facts: ClusterFacts) -> Check:
    return lambda c, key: 1 if facts.resplit_violations > 0 else 0


def _kill_no(facts: ClusterFacts) -> Check:
    return lambda c, key: (
        1 if facts.others_refused_no == 0 and facts.killed_gap_s >= PROMOTION_STALL_S else 0
    )


def _kill_yes(facts: ClusterFacts) -> Check:
    return lambda c, key: (
        2 if facts.others_refused_yes > 0 and facts.others_gap_yes_s >= PROMOTION_STALL_S / 2 else 0
    )


def _tail(facts: ClusterFacts) -> Check:
    return lambda c, key: 1 if facts.tail_written > 0 and facts.tail_survived == 0 and facts.tail_wait == 0 else 0


def _redis_questions() -> list[Question]:
    return [
        Question("Два стрима лежат в разных слотах, но на одном мастере. Что ответит этот мастер на XREAD по "
                 "обоим сразу (XREAD STREAMS a b 0 0)?",
                 ("Оба стрима: ключи на одном мастере", "CROSSSLOT: ключи одной команды должны быть в одном слоте",
                  "MOVED на другой мастер"), 1,
                 "Redis проверяет слоты, а не мастеров: слот может уехать на другой мастер при решардинге, "
                 "поэтому команда с ключами из разных слотов не выполняется нигде.", check=_crossslot),
        Question("В кластере три мастера, стрим orders вырос до миллионов записей. Как он разложен по мастерам?",
                 ("Целиком на одном: стрим — один ключ, один слот", "Поровну на трёх: кластер шардирует стрим",
                  "По записям: каждая запись в своём слоте"), 0,
                 "Кластер делит ключи, а не их содержимое. Чтобы стрим занял все мастера, его делят на шарды сами: "
                 "orders:{tag} на каждый шард, с тегами из CLUSTER SLOTS.", check=_one_master),
        Question("Какой ключ всегда попадёт в один слот с orders:{7}?",
                 ("orders:7:dlq", "orders:{7}:dlq", "{orders}:7"), 1,
                 "Хэшируется только hash tag — текст в первых фигурных скобках. Поэтому DLQ, аренда спасателя и "
                 "метки дедупа шарда несут тот же тег, и каждый скрипт остаётся в одном слоте.", check=_same_slot),
        Question("Скрипту передали в KEYS orders:{1}, а внутри он читает ещё ключ с другого мастера. Что будет?",
                 ("Redis сходит за ключом на другой мастер", "Вернётся пустой ответ",
                  "Ошибка: скрипт обратился к нелокальному ключу"), 2,
                 "Скрипт выполняется целиком на одном узле и не ходит к соседям. Все ключи скрипта объявляют в "
                 "KEYS, и все они должны быть в одном слоте.", check=_non_local_key),
    ]


def _experiment_questions(facts: ClusterFacts) -> list[Question]:
    return [
        Question("Число шардов стрима поменяли с 3 на 4, не останавливая продюсеры. Что с порядком событий одного "
                 "заказа?",
                 ("Сохранится: shard_of стабилен", "Может нарушиться: следующее событие уйдёт в другой шард и "
                  "обгонит предыдущие, ждущие в очереди старого", "Redis переложит старые записи сам"), 1,
                 "crc32 mod N при новом N переселяет долю N/(N+1) заказов при N → N+1 (3 → 4: около 3/4; 3 → 6: "
                 "половину). Поэтому набор шардов фиксируют "
                 "на всю жизнь стрима (как партиции Kafka), а растут решардингом: шард переезжает целиком.",
                 check=_resplit(facts)),
        Question("kill -9 мастера одного из трёх шардов, cluster-require-full-coverage no. Что с остальными шардами?",
                 ("Стоят все, пока реплика не станет мастером", "Продолжают списывать; стоит только шард убитого "
                  "мастера, около времени продвижения реплики", "Теряют незаписанное"), 1,
                 "Остальные слоты обслуживаются своими мастерами. Воркер держит у каждого шарда свой пул, поэтому "
                 "застрявший шард не занимает место остальных.", check=_kill_no(facts)),
        Question("То же, но с настройкой Redis по умолчанию, cluster-require-full-coverage yes?",
                 ("Ничего не меняется", "Остальные шарды тоже встают: навсегда, до ручного вмешательства",
                  "Остальные шарды тоже встают, примерно на секунду: пока слоты мёртвого мастера никто не "
                  "обслуживает, кластер в состоянии fail и все узлы отвечают CLUSTERDOWN"), 2,
                 "С yes кластер отказывает в любом ключе, пока хоть один слот без мастера. Стенд ставит no: шард "
                 "без мастера не должен останавливать остальные.", check=_kill_yes(facts)),
        Question("Мастер шарда подтвердил XADD, но реплика запись не получила, и мастер убит kill -9. Что с записью "
                 "после продвижения реплики?",
                 ("Доедет: кластер дожидается реплик", "Потеряна, и WAIT 1 сказал бы об этом (вернул бы 0)",
                  "Останется в AOF старого мастера и вернётся"), 1,
                 "Репликация асинхронная и в кластере: failover теряет неотреплицированный хвост. WAIT не "
                 "откатывает, он сообщает; продюсер с event_id переотправляет неизвестное.", check=_tail(facts)),
    ]


def quiz(*, facts: ClusterFacts) -> Quiz:
    """The quiz, with the notebook's measured facts; :meth:`Quiz.verify` it with a ``RedisCluster`` client."""
    return Quiz(_redis_questions() + _experiment_questions(facts), title=TITLE)
