"""Kafka's column, from Kafka's own documentation only: no Kafka broker can be installed here
(Debian, PyPI and npm ship clients, not the broker), so nothing in it was measured. Each cell says
what the documentation states, marked "documented, not measured here", with the page it comes from.
No figure is invented: where the documentation gives no number, the cell gives none. Each cell has its
Russian text too (notebook 11: ``column("ru")``); setting names stay as Kafka spells them.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_MEASURED = "documented, not measured here"
NOT_MEASURED_RU = "по документации, здесь не измерено"
TOPICS_RU = {"durability": "надёжность", "leader-kill": "kill -9 лидера", "duplicates": "дубли",
             "consumer-kill": "kill -9 консьюмера", "poison": "ядовитое сообщение", "order": "порядок",
             "backlog": "бэклог", "throughput": "пропускная способность"}
DOCS = "https://kafka.apache.org/documentation/"


@dataclass(frozen=True)
class Cell:
    topic: str  # the row of the comparison table it belongs to
    text: str
    reference: str
    text_ru: str = ""

    @property
    def shown(self) -> str:
        return f"{self.text} ({NOT_MEASURED}; {self.reference})"

    @property
    def shown_ru(self) -> str:
        return f"{self.text_ru} ({NOT_MEASURED_RU}; {self.reference})"


CELLS: tuple[Cell, ...] = (
    Cell("durability", "a write acknowledged with acks=all is in every in-sync replica; set replication factor 3 "
         "and min.insync.replicas=2 (its default is 1: once the in-sync set shrinks to the leader, acks=all is "
         "acknowledged by the leader alone)",
         DOCS + "#brokerconfigs_min.insync.replicas",
         "запись, подтверждённая с acks=all, есть в каждой синхронной реплике; нужны фактор репликации 3 и "
         "min.insync.replicas=2 (по умолчанию 1: когда синхронный набор сжался до лидера, acks=all "
         "подтверждает один лидер)"),
    Cell("durability", "the log is flushed to disk by the OS by default (log.flush.interval.messages defaults "
         "to Long.MAX_VALUE, log.flush.interval.ms unset): durability comes from replication, not fsync",
         DOCS + "#brokerconfigs_log.flush.interval.messages",
         "лог сбрасывает на диск ОС (log.flush.interval.messages по умолчанию Long.MAX_VALUE, "
         "log.flush.interval.ms не задан): надёжность даёт репликация, а не fsync"),
    Cell("leader-kill", "a new leader is elected from the in-sync replicas; with "
         "unclean.leader.election.enable=false (the default) a committed write survives as long as one in-sync "
         "replica is alive; with min.insync.replicas=1 (the default) an acknowledged write may be on the leader "
         "alone and lost with it",
         DOCS + "#design_replicatedlog",
         "новый лидер выбирается из синхронных реплик; при unclean.leader.election.enable=false (по умолчанию)"
         " закоммиченная запись переживает отказ, пока жива хотя бы одна синхронная реплика; при "
         "min.insync.replicas=1 (по умолчанию) подтверждённая запись может быть только на лидере и пропасть "
         "вместе с ним"),
    Cell("duplicates", "the idempotent producer (enable.idempotence, default true since 3.0) dedupes the "
         "client's own retries within one producer session; an application's re-send of an unknown outcome is a "
         "new record (the KafkaProducer javadoc: application-level re-sends cannot be de-duplicated), so here it "
         "is a duplicate the ledger absorbs, as with Redis and RabbitMQ",
         DOCS + "#semantics",
         "идемпотентный продюсер (enable.idempotence, по умолчанию включён с 3.0) гасит собственные повторы "
         "клиента в пределах одной сессии продюсера; повторная отправка приложением события с неизвестным "
         "исходом — новая запись (javadoc KafkaProducer: повторы на уровне приложения не дедуплицируются), "
         "поэтому здесь это дубль, который гасит ledger, как у Redis и RabbitMQ"),
    Cell("consumer-kill", "a consumer commits offsets; a crash between the effect and the commit re-reads "
         "from the last committed offset (at-least-once), so the handler must be idempotent",
         DOCS + "#semantics",
         "консьюмер коммитит смещения; крах между эффектом и коммитом — повторное чтение с последнего "
         "закоммиченного смещения (at-least-once), поэтому обработчик должен быть идемпотентным"),
    Cell("poison", "no dead-letter queue in the broker: the consumer (or Kafka Connect's "
         "errors.deadletterqueue.topic.name) writes failed records to another topic",
         DOCS + "#sinkconnectorconfigs_errors.deadletterqueue.topic.name",
         "в брокере нет очереди мёртвых писем: неудавшиеся записи пишет в другой топик консьюмер (или Kafka "
         "Connect через errors.deadletterqueue.topic.name)"),
    Cell("order", "order is kept within a partition; records with the same key go to the same partition, "
         "and one partition is read by one consumer of a group at a time",
         DOCS + "#intro_concepts_and_terms",
         "порядок держится внутри партиции; записи с одним ключом попадают в одну партицию, и партицию в "
         "группе читает один консьюмер в каждый момент"),
    Cell("backlog", "retention is by time or size (log.retention.hours, log.retention.bytes), not by "
         "consumption: a backlog is on disk, and reading old data is sequential",
         DOCS + "#brokerconfigs_log.retention.hours",
         "хранение — по времени или размеру (log.retention.hours, log.retention.bytes), а не до прочтения: "
         "бэклог лежит на диске, старые данные читаются последовательно"),
    Cell("throughput", "the documentation gives no figure for a setup like this one", DOCS + "#design",
         'документация не даёт цифры для такой установки'),
)


def cells_for(topic: str) -> list[Cell]:
    return [c for c in CELLS if c.topic == topic]


def column(lang: str = "en") -> dict[str, str]:
    """``topic -> text`` of Kafka's column, each with its mark and its reference (``ru``: in Russian)."""
    out: dict[str, list[str]] = {}
    for cell in CELLS:
        topic = TOPICS_RU[cell.topic] if lang == "ru" else cell.topic
        out.setdefault(topic, []).append(cell.shown_ru if lang == "ru" else cell.shown)
    return {topic: "; ".join(texts) for topic, texts in out.items()}
