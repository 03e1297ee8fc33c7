"""The module 1 quiz (notebook 04): Pub/Sub, streams, groups, claiming, persistence.

``quiz(redis_url=..., graceful_stop=...)`` builds it; every question about Redis behaviour
carries a check that runs the behaviour on a real Redis (under the prefix ``Quiz.verify``
gives it) and returns the option index Redis proves:

- XACK, the late subscriber, ``MAXLEN 0``, COUNT, the evicted group: a few commands each;
- min idle below the handling time: :func:`labs.experiments.claiming.double_processing_run`;
- ``kill -9`` right after XADD under ``appendfsync everysec``: a throwaway AOF server of its own
  (:func:`labs.experiments.persistence.kill_and_count` with no wait), plus the two counters
  Redis keeps for the exception, ``aof_buffer_length`` and ``aof_delayed_fsync``: while a
  background fsync is still running, Redis postpones the ``write()`` of its AOF buffer (up to
  2 s) yet answers the clients, so a killed process can lose acknowledged writes. That loss
  needs a disk slower than the fsync interval, which no notebook can make on demand; the check
  shows the common case (nothing lost) and that Redis reports the postponement;
- the graceful stop: the notebook's own ``stop_and_count`` result (``graceful_stop``).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

import redis

from labs import replies
from labs.experiments import claiming
from labs.experiments.persistence import StopResult, kill_and_count
from labs.launcher import topologies
from labs.launcher.process import command
from labs.panels.quiz import Check, Question, Quiz

TITLE = "Проверь себя: модуль 1"


def _xack(c: redis.Redis, p: str) -> int:
    c.xgroup_create(p + "s", "g", id="0", mkstream=True)
    c.xadd(p + "s", {"n": "1"})
    msg_id = replies.read(c.xreadgroup("g", "c1", {p + "s": ">"}))[0][1][0][0]
    c.xack(p + "s", "g", msg_id)
    return 1 if (c.xlen(p + "s"), c.xpending(p + "s", "g")["pending"]) == (1, 0) else 0


def _late_subscriber(c: Any, p: str) -> int:  # redis.Redis; its pubsub() is unannotated
    c.publish(p + "ch", "missed")
    with contextlib.closing(c.pubsub()) as sub:
        sub.subscribe(p + "ch")
        got = [m for m in iter(lambda: sub.get_message(timeout=0.3), None) if m["type"] == "message"]
    return 1 if not got else 0


def _maxlen_zero(c: redis.Redis, p: str) -> int:
    c.xadd(p + "s", {"n": "1"})
    command(c, "XADD", p + "s", "MAXLEN", "0", "*", "n", "2")  # raw: redis-py's maxlen=0 sends "~ 0"
    return 1 if c.xlen(p + "s") == 0 else 0


def _count(c: redis.Redis, p: str) -> int:
    c.xgroup_create(p + "s", "g", id="0", mkstream=True)
    for i in range(10):
        c.xadd(p + "s", {"n": str(i)})
    for _ in range(3):
        c.xreadgroup("g", "c1", {p + "s": ">"}, count=2)
    return {2: 0, 6: 1, 0: 2}.get(int(c.xpending(p + "s", "g")["pending"]), -1)


def _key_gone(c: redis.Redis, p: str) -> int:
    # eviction removes the key as DEL does (notebook 01 shows the real eviction)
    c.xgroup_create(p + "s", "g", id="0", mkstream=True)
    c.delete(p + "s")
    try:
        reply = c.xreadgroup("g", "c1", {p + "s": ">"}, count=1)
    except redis.ResponseError as exc:
        return 1 if str(exc).startswith("NOGROUP") else 2
    return 0 if not reply else 2


def _min_idle(redis_url: str) -> Check:
    def check(c: redis.Redis, p: str) -> int:
        run = claiming.double_processing_run(redis_url, p + "claim", min_idle_ms=20, entries=5, work_ms=50)
        return 1 if run.duplicates > 0 else 0

    return check


def _kill_right_after_xadd(c: redis.Redis, p: str) -> int:
    """0: everything lost; 1: nothing can be lost; 2: kept here, and Redis reports postponed writes."""
    with tempfile.TemporaryDirectory(prefix="quiz-aof-") as tmp:
        topology = topologies.on_free_ports("aof", Path(tmp))
        try:
            topology.ensure()
            result = kill_and_count(topology, stream=p + "aof", n_writes=200, fsync_wait_s=0)
            with contextlib.closing(redis.Redis.from_url(topology.url)) as server:
                info = server.info("persistence")
                policy = server.config_get("appendfsync")["appendfsync"]
        finally:
            topology.stop()
    if result.survived == 0:
        return 0
    postpones = policy in ("everysec", b"everysec") and {"aof_buffer_length", "aof_delayed_fsync"} <= set(info)
    return 2 if postpones else 1


def _graceful_stop(graceful_stop: StopResult) -> Check:
    def check(c: redis.Redis, p: str) -> int:
        return 1 if graceful_stop.survived == graceful_stop.acknowledged > 0 else 0

    return check


def quiz(*, redis_url: str, graceful_stop: StopResult) -> Quiz:
    """The quiz, with ``graceful_stop`` the notebook's ``stop_and_count(..., default_save=True)``."""
    return Quiz(
        [
            Question(
                "Что делает XACK с записью стрима?",
                ("удаляет её из стрима", "снимает её с учёта группы (из PEL), а сама запись остаётся в стриме",
                 "переносит её в стрим <stream>:acked"),
                1, "XACK меняет только PEL группы; хранение ограничивает MAXLEN/XTRIM, как retention в Kafka.",
                check=_xack,
            ),
            Question(
                "Подписчик Pub/Sub подписался через мгновение после PUBLISH. Что он получит?",
                ("это сообщение: канал хранит последние", "ничего: истории у канала нет", "ошибку: сообщение устарело"),
                1, "Pub/Sub доставляет только тем, кто подписан в момент публикации: at-most-once.",
                check=_late_subscriber,
            ),
            Question(
                "Что сделает сам Redis с командой XADD orders MAXLEN 0 * ...?",
                ("добавит запись без ограничения длины", "добавит запись и тут же обрежет стрим до пустого",
                 "вернёт ошибку"),
                1, "«MaxLen: 0 = без лимита» — соглашение go-redis; Redis понимает 0 буквально. А redis-py с "
                   "maxlen=0 шлёт MAXLEN ~ 0, который за вызов удаляет не больше 10 000 записей.",
                check=_maxlen_zero,
            ),
            Question(
                "Консьюмер трижды вызвал XREADGROUP ... COUNT 2 и ничего не подтвердил. Сколько записей в его PEL?",
                ("2 — COUNT ограничивает работу в руках", "6 — COUNT ограничивает только одно чтение",
                 "0 — без XACK записи не выдаются"),
                1, "COUNT — размер одного ответа, а не prefetch RabbitMQ: предел «в работе» держит сам воркер.",
                check=_count,
            ),
            Question(
                "Стрим вытеснен (allkeys-lru) вместе с группой. Что получит консьюмер на XREADGROUP?",
                ("пустой ответ по BLOCK", "ошибку NOGROUP", "записи стрима заново"),
                1, "Группа и PEL живут внутри ключа стрима; ключа нет — группы нет. "
                   "Продюсер же молча создаст новый стрим.",
                check=_key_gone,
            ),
            Question(
                "Обработка записи идёт 50 мс, а спасатель делает XAUTOCLAIM с min idle 20 мс. Что будет?",
                ("ничего: XAUTOCLAIM не трогает записи живого консьюмера",
                 "спасатель заберёт записи у живого консьюмера, и они будут обработаны дважды",
                 "XAUTOCLAIM вернёт ошибку BUSY"),
                1, "Redis знает только idle записи, а не жив ли владелец: min idle берут с запасом больше самой "
                   "долгой обработки.",
                check=_min_idle(redis_url),
            ),
            Question(
                "AOF everysec. Процесс Redis убит kill -9 сразу после ответа на XADD (машина жива). Что с записью?",
                ("пропадёт: fsync ещё не прошёл",
                 "уцелеет всегда: Redis сделал write() до ответа, данные в page cache ОС",
                 "обычно уцелеет, но не гарантированно: пока идёт фоновый fsync, Redis может отложить write() "
                 "до ~2 с, уже ответив клиенту"),
                2, "Обычно Redis отдаёт буфер AOF ядру (write()) до ответа, и убитый процесс ничего не теряет: "
                   "данные в page cache. Но если фоновый fsync не успевает (медленный диск), Redis откладывает "
                   "write() до 2 с и при этом отвечает клиентам — kill -9 в это окно теряет подтверждённое. "
                   "INFO persistence показывает это: aof_buffer_length и aof_delayed_fsync (ноутбук 03).",
                check=_kill_right_after_xadd,
            ),
            Question(
                "AOF выключен, правила save по умолчанию. Redis остановили через SHUTDOWN (или docker stop). "
                "Что после рестарта?",
                ("пусто: без AOF ничего не пишется", "данные на месте: при остановке Redis сохранил RDB",
                 "Redis не запустится без AOF"),
                1, "Вежливая остановка пишет RDB, если есть правила save; поэтому опыт лабораторной делают через "
                   "kill -9.",
                check=_graceful_stop(graceful_stop),
            ),
        ],
        title=TITLE,
    )
