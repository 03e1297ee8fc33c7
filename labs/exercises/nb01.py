"""Exercise checks of notebook 01 (Pub/Sub and Streams): ``check("01.1")`` ... ``check("01.3")``.

Each check reads the running Redis (or the experiment's own record) and compares it with what
the student's cell left behind; the messages say what to look at, never the numbers to type in.

- 01.1 «Мягкий предел буфера»: the preparing cell subscribes ``soft_subscriber`` (client name
  ``soft_name``) and keeps ``soft_original``; the student sets a soft ``pubsub`` limit, publishes
  until ``PUBLISH`` returns 0 and records ``soft_over_s`` and ``soft_cut_s``.
- 01.2 «Политика без кандидатов»: ``run_eviction`` under ``volatile-lru`` with no TTL on the cache
  (``no_candidates``), and which policy of the table it behaves like (``no_candidates_like``).
- 01.3 «Узел и примерная обрезка»: 2,555 ``XADD`` with ``MAXLEN ~ 1000`` on nodes of 100 and of 10
  entries (``P + "ex:nodes:100"``, ``P + "ex:nodes:10"``); ``excess_100``, ``excess_10``.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from labs.exercises.exercise import Exercise, expect
from labs.exercises.facts import client_of, named_stream, number, of_kind, prefix_of
from labs.experiments.eviction import EvictionResult

SOFT_S = 1  # the soft limit's seconds in 01.1
# Redis keeps the time a client went over its soft limit with a one-second resolution, so the
# disconnection comes between SOFT_S and SOFT_S + 1 seconds later; the rest is slack for a busy machine.
SOFT_GAP_S = (SOFT_S - 0.2, SOFT_S + 2.5)
LIMIT = 1000  # MAXLEN ~ in 01.3
DEFAULT_NODE = 100
SMALL_NODE = 10
POLICIES = ("allkeys-lru", "noeviction", "volatile-lru")


def _verify_soft_limit(ns: Mapping[str, object]) -> str:
    """01.1: restored setting, the subscriber gone, and a gap of about the soft seconds before the cut."""
    client = client_of(ns)
    now = client.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    expect(
        now == ns["soft_original"],
        "`client-output-buffer-limit` не возвращён: верните `soft_original` в `finally` той же ячейки "
        "(иначе следующий медленный подписчик вылетит по вашему пределу).",
    )
    names = {str(c.get("name")) for c in client.client_list()}
    expect(
        ns["soft_name"] not in names,
        "Подписчик всё ещё подключён: сервер его не отключил. Публикуйте, пока `PUBLISH` не вернёт 0, "
        "и проверьте, что предел стоит на классе `pubsub`.",
    )
    over_s, cut_s = ns["soft_over_s"], number(ns["soft_cut_s"], "soft_cut_s")
    expect(
        over_s is not None,
        "`soft_over_s` пуст: `omem` подписчика ни разу не был замечен выше 256 КБ. Смотрите его в `CLIENT LIST` "
        "(по имени `soft_name`) после каждого `PUBLISH`; если вы так и делали, соединение рвалось в самый момент "
        "перехода — так работает жёсткий предел, а мягкий — третье и четвёртое числа (жёсткий — 0).",
    )
    over = number(over_s, "soft_over_s")
    gap_s = cut_s - over
    expect(gap_s >= 0, "`soft_cut_s` раньше `soft_over_s`: обе отметки считаются от начала публикации.")
    expect(
        gap_s >= SOFT_GAP_S[0],
        "Соединение разорвано почти сразу после перехода предела — так работает жёсткий предел. "
        "Мягкий — третье и четвёртое числа: `pubsub 0 262144 1` (жёсткий 0, мягкий 256 КБ на 1 с).",
    )
    expect(
        gap_s <= SOFT_GAP_S[1],
        "От перехода предела до разрыва прошло слишком много: мягкий предел здесь — 1 с. Проверьте класс: "
        "предел должен стоять на `pubsub` (`pubsub 0 262144 1`); на `normal` подписчика рвёт стандартный "
        "предел pubsub, много позже. И публикуйте без пауз длиннее 10 мс (иначе буфер успевает опустеть ниже "
        "предела, и отсчёт начинается заново).",
    )
    return (
        f"Предел перейдён через {over:.2f} с, разрыв — ещё через {gap_s:.2f} с: мягкий предел "
        "даёт отсрочку, а жёсткий выше рвал соединение сразу. Redis считает эту секунду по часам с "
        "точностью до секунды, поэтому отсрочка — от одной до двух секунд."
    )


def _verify_no_candidates(ns: Mapping[str, object]) -> str:
    """01.2: the run's own record says which of the three policies this one behaves like."""
    like = ns["no_candidates_like"]
    result = of_kind(ns["no_candidates"], EvictionResult, "no_candidates", "результатом `eviction.run_eviction(...)`")
    expect(result.policy == "volatile-lru", "Нужен прогон с политикой `volatile-lru`, а в `no_candidates` другая.")
    expect(
        result.evicted_keys == 0,
        "В этом прогоне Redis вытеснял ключи — значит, у ключей кэша был TTL. Запустите `run_eviction` без `ttl_s`.",
    )
    expect(like in POLICIES, f"`no_candidates_like` — одно из имён: {', '.join(POLICIES)}.")
    refused = result.producer_error.startswith("OutOfMemoryError") and result.stream_exists
    truth = "noeviction" if refused else "allkeys-lru"
    expect(
        refused or like != "noeviction" or result.producer_error.startswith("OutOfMemoryError"),
        f"Этот прогон не дошёл до отказа: продюсер не получил OOM (`producer_error`: {result.producer_error[:80]!r}, "
        f"стрим на месте: {result.stream_exists}). Запустите ячейку ещё раз.",
    )
    expect(
        like == truth,
        "Не похоже. Сравните три поля прогона — `cache_error`, `producer_error`, `stream_exists` — с тремя "
        "строками таблицы выше: какая строка даёт то же самое?",
    )
    return (
        "Верно: без единого ключа с TTL у `volatile-lru` нет кандидатов, и он ведёт себя как `noeviction` — "
        "запись кэша и `XADD` получают OOM, стрим с группой и PEL цел. Кэш на такой политике обязан ставить TTL "
        "каждому ключу, иначе он упрётся в память так же, как очередь."
    )


def _nodes(client: redis.Redis, stream: str) -> tuple[int, int]:
    """(XLEN, listpack nodes) of a stream: ``XINFO STREAM`` counts its nodes as ``radix-tree-keys``."""
    info = client.xinfo_stream(stream)
    return int(info["length"]), int(info["radix-tree-keys"])


def _verify_node_size(ns: Mapping[str, object]) -> str:
    """01.3: the excess over MAXLEN ~ is under one node, for nodes of 100 and of 10 entries."""
    client, p = client_of(ns), prefix_of(ns)
    configured = client.config_get("stream-node-max-entries")["stream-node-max-entries"]
    if configured is None:  # what int(None) would raise
        raise TypeError("CONFIG GET stream-node-max-entries gave no value")
    node = int(configured)
    expect(
        node == DEFAULT_NODE,
        "`stream-node-max-entries` не вернулся к 100: верните его в `finally` той же ячейки (ноутбук выше "
        "рассчитывает на узлы по 100).",
    )
    for size in (DEFAULT_NODE, SMALL_NODE):
        named_stream(ns, f"ex:nodes:{size}")
    length_100, nodes_100 = _nodes(client, f"{p}ex:nodes:100")
    length_10, nodes_10 = _nodes(client, f"{p}ex:nodes:10")
    expect(
        nodes_10 * SMALL_NODE >= length_10,
        "В стриме `ex:nodes:10` узлы не по 10 записей (их видно в `XINFO STREAM`, поле `radix-tree-keys`): "
        "ставьте `stream-node-max-entries 10` до записи в него, а возвращайте 100 после.",
    )
    expect(
        nodes_100 * SMALL_NODE < length_100,
        "В стриме `ex:nodes:100` узлы мелкие: в него надо писать при обычных 100 записях на узел.",
    )
    for length, size, name in ((length_100, DEFAULT_NODE, "excess_100"), (length_10, SMALL_NODE, "excess_10")):
        expect(
            length > LIMIT,
            f"Длина стрима с узлами по {size} ровно {LIMIT} или меньше: проверьте `maxlen=1000`, `approximate=True` "
            "и число записей (2 555: при числе, кратном размеру узла, обрезка ложится ровно на лимит).",
        )
        expect(
            length < LIMIT + size, f"Стрим с узлами по {size} длиннее лимита больше чем на узел: нужен `maxlen=1000`."
        )
        expect(
            number(ns[name], name) == length - LIMIT,
            f"`{name}` не совпадает с `XLEN` своего стрима минус 1000.",
        )
    return (
        f"Превышение {length_100 - LIMIT} при узлах по 100 и {length_10 - LIMIT} при узлах по 10: `MAXLEN ~` "
        "удаляет только целые узлы, поэтому лишнего всегда меньше одного узла. Мелкие узлы точнее, но "
        "их больше (`radix-tree-keys`), и каждый стоит памяти на заголовок."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="01.1",
        title="Мягкий предел буфера",
        needs=("soft_original", "soft_name", "soft_over_s", "soft_cut_s"),
        verify=_verify_soft_limit,
        nudge=(
            "Предел задаётся параметром `client-output-buffer-limit` для класса pubsub; подписчик, "
            "который не читает, копит ответы в своём буфере — его размер виден в CLIENT LIST."
        ),
        hint=(
            "Поставьте мягкий предел (жёсткий — 0, мягкий — 256 КБ, секунды — 1), публикуйте крупные "
            "сообщения с короткой паузой, пока PUBLISH не вернёт 0, и после каждой публикации смотрите "
            "поле `omem` своего подписчика в `r.client_list()`. Исходное значение параметра верните в "
            "`finally`."
        ),
    ),
    Exercise(
        id="01.2",
        title="Политика без кандидатов",
        needs=("no_candidates", "no_candidates_like"),
        verify=_verify_no_candidates,
        nudge=(
            "Политика вытеснения выбирает жертв только среди своих кандидатов: какие ключи считаются "
            "кандидатами у `volatile-*`?"
        ),
        hint=(
            "Тот же опыт `eviction.run_eviction`, что и выше, но с политикой `volatile-lru` и без TTL у "
            "ключей; затем сравните поля результата с таблицей трёх политик."
        ),
    ),
    Exercise(
        id="01.3",
        title="Узел и примерная обрезка",
        needs=("excess_100", "excess_10"),
        verify=_verify_node_size,
        nudge=(
            "Приблизительная обрезка (`MAXLEN ~`) удаляет только целые узлы радикс-дерева; сколько "
            "записей в узле, задаёт `stream-node-max-entries`."
        ),
        hint=(
            "Заполните стрим конвейером с `maxlen=1000, approximate=True`, посчитайте, на сколько XLEN "
            "больше 1000; повторите на новом стриме с меньшим `stream-node-max-entries` и верните "
            "параметр в `finally`."
        ),
    ),
)
