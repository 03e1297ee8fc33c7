"""Exercise checks of notebook 03 (persistence and replication): ``check("03.1")`` ... ``check("03.3")``.

The servers of 03.1 and 03.2 are the exercise's own (free ports, files under the notebook's
``RUN_DIR``) and stop inside the student's cell, so these checks read the student's records of
the run (the producer's acknowledged IDs and what was found after it) and the pid files the
servers left: nothing may still run. 03.3 needs no server: redis-py's CRC16 is the key, and the
notebook shows it agreeing with ``CLUSTER KEYSLOT`` on a real cluster node.

- 03.1 «Только RDB»: writes, ``SAVE``, more writes, ``kill -9``, restart: ``snapshot_ids``,
  ``later_ids``, ``rdb_before_snapshot``, ``rdb_after_snapshot``.
- 03.2 «WAIT после разреза»: a master and a replica, the link cut, writes, ``WAIT 1 2000`` after the
  replica is resumed: ``cut_tail_ids``, ``tail_wait``, ``tail_wait_ms``, ``tail_on_replica``.
- 03.3 «Hash tags»: ``same_slot_as_42`` predicts which keys share the slot of ``42``.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis.crc

from labs.exercises.exercise import Exercise, expect
from labs.exercises.facts import number, of_kind, run_dir_of, stopped

MIN_WRITES = 100  # 03.1 and 03.2: fewer acknowledged writes than this prove little
WAIT_TIMEOUT_MS = 2000  # 03.2
TAGGED_KEYS = ("user:{42}:cart", "user:{42}:orders", "{}{42}", "{42}{}")


def _ids(ns: Mapping[str, object], name: str, at_least: int) -> list[object]:
    ids = of_kind(ns[name], (list, tuple), name, "списком ID, которые вернул `write_acknowledged`")
    expect(len(ids) >= at_least, f"В `{name}` меньше {at_least} ID: запишите столько, сколько просит задание.")
    return list(ids)


def _verify_rdb_only(ns: Mapping[str, object]) -> str:
    """03.1: what was written before SAVE came back after kill -9, what came after did not."""
    stopped(run_dir_of(ns), "ex-rdb")
    before, after = _ids(ns, "snapshot_ids", MIN_WRITES), _ids(ns, "later_ids", MIN_WRITES)
    kept = number(ns["rdb_before_snapshot"], "rdb_before_snapshot")
    lost = number(ns["rdb_after_snapshot"], "rdb_after_snapshot")
    expect(
        kept <= len(before) and lost <= len(after),
        "Найдено больше, чем записано: `count_present` считает переданные ему ID в стриме перезапущенного сервера.",
    )
    expect(
        kept > 0,
        "Из записанного до снимка не вернулось ничего: снимка не было (`SAVE` — до второй серии записей) или "
        "считали не на том сервере и не в том стриме.",
    )
    expect(
        kept == len(before),
        "Вернулась только часть записанного до снимка: `SAVE` сохраняет всё, что есть в памяти в этот момент, — "
        "делайте его после первой серии, на том же сервере.",
    )
    expect(
        lost < len(after),
        "Вернулось и всё записанное после снимка: сервер остановили вежливо (`SHUTDOWN` пишет новый снимок) или "
        "у него включён AOF. Нужна топология `single` и `kill -9` (`topo.kill()`).",
    )
    expect(lost == 0, "Из записанного после снимка вернулась часть: считайте по `later_ids` на перезапущенном сервере.")
    return (
        f"До снимка — {int(kept)} из {len(before)} на месте, после снимка — {int(lost)} из {len(after)}: RDB хранит "
        "состояние на момент последнего снимка, а всё после него `kill -9` теряет. С правилами `save` по "
        "умолчанию это минуты работы; строка «только RDB» таблицы выше теперь проверена."
    )


def _verify_wait_after_cut(ns: Mapping[str, object]) -> str:
    """03.2: WAIT after SIGCONT returns 1 once the replica reconnected and caught up from the backlog."""
    stopped(run_dir_of(ns), "ex-wait")
    cut = _ids(ns, "cut_tail_ids", 10)
    reply, waited_ms = ns["tail_wait"], number(ns["tail_wait_ms"], "tail_wait_ms")
    expect(
        reply in (0, 1),
        "`tail_wait` — ответ `WAIT 1 ...`: сколько реплик подтвердили запись (здесь реплика одна: 0 или 1).",
    )
    expect(
        reply == 1,
        "`WAIT` вернул 0: реплика не подтвердила записи, пока он ждал. Его надо вызывать **после** выхода из "
        "разреза (`SIGCONT`), с таймаутом в 2000 мс: реплике нужно время, чтобы переподключиться и дочитать backlog.",
    )
    expect(
        0 <= waited_ms <= WAIT_TIMEOUT_MS + 500,
        "`tail_wait_ms` вне таймаута `WAIT`: засекайте `time.monotonic()` прямо вокруг вызова `WAIT 1 2000`.",
    )
    on_replica = number(ns["tail_on_replica"], "tail_on_replica")
    expect(
        on_replica == len(cut),
        "На реплике не все записи разреза: считайте `count_present` на реплике по `cut_tail_ids` после `WAIT`, "
        "который вернул 1.",
    )
    return (
        f"`WAIT 1` вернул 1 через {waited_ms:.1f} мс после разморозки, и все {len(cut)} записей разреза на реплике: "
        "она сама переподключилась и дочитала их из backlog мастера. Внутри разреза `WAIT` на каждую запись вернул бы "
        "0 — «исход неизвестен» — для записей, которые через миллисекунды оказались на реплике."
    )


def _verify_hash_tags(ns: Mapping[str, object]) -> str:
    """03.3: the forecast against redis-py's CRC16 slots."""
    forecast = of_kind(ns["same_slot_as_42"], dict, "same_slot_as_42", "словарём {ключ: True или False}")
    expect(
        set(forecast) == set(TAGGED_KEYS),
        f"В словаре должны быть ровно эти ключи: {', '.join(TAGGED_KEYS)}.",
    )
    expect(all(isinstance(v, bool) for v in forecast.values()), "Значения словаря — `True` или `False`.")
    slot_42 = redis.crc.key_slot(b"42")
    wrong = sum(forecast[key] != (redis.crc.key_slot(key.encode()) == slot_42) for key in TAGGED_KEYS)
    expect(
        wrong == 0,
        f"Не совпало для {wrong} из {len(TAGGED_KEYS)} ключей. Правило: берётся **первая** `{{` и **первая** `}}` "
        "после неё; непустое между ними — тег, пустое — и тогда хэшируется весь ключ, дальше Redis не ищет.",
    )
    return (
        "Все четыре прогноза совпали со слотами. `{}{42}` — ловушка: первая пара скобок пустая, поэтому хэшируется "
        "весь ключ, и `{42}` дальше уже не считается тегом."
    )


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="03.1",
        title="Только RDB",
        setup=("RUN_DIR",),
        needs=("snapshot_ids", "later_ids", "rdb_before_snapshot", "rdb_after_snapshot"),
        verify=_verify_rdb_only,
        nudge=(
            "Без AOF данные переживают `kill -9` только до последнего снимка RDB."
        ),
        hint=(
            "Отдельная топология `single` на свободных портах в `RUN_DIR`: серия подтверждённых записей, "
            "снимок `SAVE`, ещё серия, `kill()` и снова `ensure()`; `count_present` для каждой серии; в "
            "`finally` — `stop()`."
        ),
    ),
    Exercise(
        id="03.2",
        title="WAIT после разреза",
        setup=("RUN_DIR",),
        needs=("cut_tail_ids", "tail_wait", "tail_wait_ms", "tail_on_replica"),
        verify=_verify_wait_after_cut,
        nudge=(
            "WAIT считает реплики, подтвердившие запись; при разрезанной связи ждать некого."
        ),
        hint=(
            "Пара `master_and_replica`: сначала убедитесь, что WAIT видит реплику; запишите серию внутри "
            "`link_cut`, после него засеките время вокруг WAIT с таймаутом и посчитайте на реплике, что "
            "дошло."
        ),
    ),
    Exercise(
        id="03.3",
        title="Hash tags",
        setup=(),
        needs=("same_slot_as_42",),
        verify=_verify_hash_tags,
        nudge=(
            "Hash tag — это текст в первых фигурных скобках ключа, если он не пуст."
        ),
        hint=(
            "Найдите первую `{` и первую `}` после неё. Непустое между ними — хэшируется только оно; "
            "иначе хэшируется весь ключ. Сравните результат с тем, что ожидает задание."
        ),
    ),
)
