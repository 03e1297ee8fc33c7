"""The monitoring quiz (notebook 10): what Redis and Prometheus show, which alerts are right, which are false.

``quiz(prom=..., facts=...)`` builds it. Questions about Redis behaviour are checked on a real
Redis (a few commands under the key prefix), questions about PromQL and the rules on the running
Prometheus (``prom``: an instant query, ``/api/v1/rules``), and questions about the experiments
against the notebook's own measurements (:class:`MonitoringFacts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from labs.launcher.prom_api import PrometheusAPI
from labs.panels.quiz import Check, Question, Quiz

TITLE = "Проверь себя: мониторинг и инциденты"


@dataclass(frozen=True, kw_only=True)
class MonitoringFacts:
    """What notebook 10 measured."""

    memory_alert_at: float  # unix time RedisMemoryHigh started firing
    first_oom_at: float  # unix time the producer got its first OOM error
    quiet_idle_s: float  # how long the quiet stream's consumer had been idle
    quiet_loud: tuple[str, ...]  # non-info alerts that fired around the planned failover and the quiet stream
    quiet_info: tuple[str, ...]  # info alerts of the same window
    hotkeys_refusal: str  # what --hotkeys said under a non-LFU policy


def _ratio_with_no_limit(prom: PrometheusAPI) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        value = prom.query("vector(1048576) / vector(0)")[0]["value"][1]
        return {"0": 0, "+Inf": 1}.get(value, 2)

    return check


def _lag_field(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    for i in range(3):
        c.xadd(key + "s", {"n": i})
    c.xreadgroup("g", "c", {key + "s": ">"}, count=1)
    group = c.xinfo_groups(key + "s")[0]
    return next(i for i, name in enumerate(("pending", "lag", "entries-read")) if group[name] == 2)


def _consumer_outlives(c: redis.Redis, key: str) -> int:
    c.xgroup_create(key + "s", "g", id="0", mkstream=True)
    c.xadd(key + "s", {"n": 1})
    c.xreadgroup("g", "worker-4242", {key + "s": ">"})  # the worker reads, then its process dies
    names = [x["name"] for x in c.xinfo_consumers(key + "s", "g")]
    return 1 if [n.decode() if isinstance(n, bytes) else n for n in names] == ["worker-4242"] else 0


def _severity_of(prom: PrometheusAPI) -> Check:
    options = ("StreamDeadLettered", "RedisDown", "RedisFragmented")

    def check(c: redis.Redis, key: str) -> int:
        severity = {r["name"]: r.get("labels", {}).get("severity") for g in prom.get("rules")["groups"]
                    for r in g["rules"] if r["type"] == "alerting"}
        critical = [i for i, name in enumerate(options) if severity.get(name) == "critical"]
        return critical[0] if len(critical) == 1 else -1

    return check


def _facts_check(answer: int, holds: bool) -> Check:
    def check(c: redis.Redis, key: str) -> int:
        return answer if holds else -1

    return check


def quiz(*, prom: PrometheusAPI, facts: MonitoringFacts) -> Quiz:
    """The quiz; :meth:`Quiz.verify` runs every check (Redis, Prometheus, the facts)."""
    questions = [
        Question("У Redis maxmemory 0. Что даст PromQL-выражение used_memory / maxmemory?",
                 ("0", "+Inf: «заполнено» бесконечно, и наивное правило «> 0,9» сработает",
                  "Ошибку деления на ноль"), 1,
                 "maxmemory 0 — это «без лимита», а не «лимит ноль». Правило памяти должно отсекать такие "
                 "узлы: and redis_memory_max_bytes > 0.", check=_ratio_with_no_limit(prom)),
        Question("Какое поле XINFO GROUPS (Redis 7) говорит, сколько записей группе ещё не выдано?",
                 ("pending", "lag", "entries-read"), 1,
                 "pending — выдано, но не подтверждено (PEL); lag — ещё не выдано. Экспортер 1.45 lag не "
                 "отдаёт, поэтому здесь его добавляет Lua-скрипт сбора.", check=_lag_field),
        Question("Процесс воркера умер. Что станет с его консьюмером в XINFO CONSUMERS?",
                 ("Исчезнет сразу", "Останется, и его idle будет расти, пока кто-то не сделает XGROUP DELCONSUMER",
                  "Исчезнет через min idle спасателя"), 1,
                 "Redis не знает о процессах. Поэтому алерт «нет консьюмеров» не сработает никогда, а алерт "
                 "на один idle сработает и на тихом стриме: простой сочетают с бэклогом.", check=_consumer_outlives),
        Question("Консьюмер тихого стрима простаивал дольше порога. Сработал ли StreamNoLiveConsumer?",
                 ("Да: простой больше порога", "Нет: у группы нет бэклога, ждать ей нечего",
                  "Нет: алерт смотрит только на число консьюмеров"), 1,
                 "Правило требует и бэклог (lag > 0), и простой всех консьюмеров. Тихий стрим — норма, а не авария.",
                 check=_facts_check(1, facts.quiet_idle_s > 2 and "StreamNoLiveConsumer" not in facts.quiet_loud)),
        Question("Что ответит redis-cli --hotkeys при maxmemory-policy noeviction?",
                 ("Список горячих ключей", "Откажется: частоту обращений Redis считает только при LFU-политике",
                  "Пустой список"), 1,
                 "Счётчик LFU (OBJECT FREQ) ведётся только под *-lfu. Включить allkeys-lfu на время разбора "
                 "можно, но счёт пойдёт с нуля: ключи, записанные до переключения, показывают 0, как бы часто "
                 "их ни читали, — видно только движение после него. Поэтому в проде смотрят ещё и на "
                 "commandstats и на клиентов.",
                 check=_facts_check(1, "LFU" in facts.hotkeys_refusal)),
        Question("Продюсер заполнял память при noeviction. Что было раньше?",
                 ("Первая ошибка OOM у продюсера", "Алерт RedisMemoryHigh (80 % maxmemory)", "Одновременно"), 1,
                 "Порог 80 % с for: срабатывает, пока запас ещё есть. Алерт по ошибкам OOM — уже про потерю записей.",
                 check=_facts_check(1, facts.memory_alert_at < facts.first_oom_at)),
        Question("Какой из этих алертов должен будить дежурного ночью?",
                 ("StreamDeadLettered: в DLQ есть записи", "RedisDown: Redis не отвечает",
                  "RedisFragmented: фрагментация 1,6"), 1,
                 "Будит то, что прямо сейчас теряет или задерживает работу (critical). DLQ и фрагментация — "
                 "тикет на рабочее время (warning).", check=_severity_of(prom)),
        Question("Плановый SENTINEL FAILOVER в этих правилах даёт...",
                 ("Ни одного алерта", "Только RedisFailoverHappened (info): запись в ленту событий, без звонка",
                  "RedisReplicationLinkDown и RedisDown"), 1,
                 "Роль узла сменилась — это факт для хронологии. Связь реплики рвётся на секунды, а for: у "
                 "RedisReplicationLinkDown длиннее переключения.",
                 check=_facts_check(1, not facts.quiet_loud and "RedisFailoverHappened" in facts.quiet_info)),
    ]
    return Quiz(questions, title=TITLE)
