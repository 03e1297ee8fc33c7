"""Exercise checks of notebook 09 (Redis Cluster): ``check("09.1")`` ... ``check("09.4")``.

``r`` is the notebook's ``redis.cluster.RedisCluster`` client, ``P`` its key prefix. Each
check looks at the cluster (or recomputes the routing rule) and says what is wrong without
giving the answer:

- 09.1 «Где живёт ключ»: ``owner_port``, the port of the master that serves ``P + "ex:payments"``;
- 09.2 «Скрипт в одном слоте»: ``dlq_key``, a dead-letter stream for the shard
  ``P + "ex:orders:{7}"`` that the worker's XACK + XADD script can use, and the stuck entry moved;
- 09.3 «Маршрут по order_id»: three events of each of ``order-0`` .. ``order-11`` in the shards
  of ``route_shards``, each order in the shard ``shard_of`` names; ``sent``, how many;
- 09.4 «Сколько заказов переедет»: ``moved_4`` and ``moved_6``, the shares of ``order-0`` ..
  ``order-999`` whose shard changes when 3 shards become 4, or 6.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from redis.cluster import RedisCluster

from labs.exercises.exercise import Exercise, Miss, expect
from labs.exercises.facts import made, prefix_of
from labs.experiments.cluster_load import master_layout
from solutions.shards import ShardSet, plan_tags, shard_of

GROUP = "billing"
ORDERS, PER_ORDER = 12, 3
ROUTE_STREAM = "ex:route"


def cluster(ns: Mapping[str, object]) -> Any:
    """The notebook's ``RedisCluster`` client ``r``, as Any: redis-py leaves most of its methods unannotated."""
    return made(ns, "r", RedisCluster)


def _verify_owner(ns: Mapping[str, object]) -> str:
    r, key = cluster(ns), prefix_of(ns) + "ex:payments"
    port = ns["owner_port"]
    expect(isinstance(port, int) and not isinstance(port, bool),
           "`owner_port` должен быть числом — портом узла, например 6400.")
    master = r.get_node_from_key(key)
    replicas = {int(addr.rsplit(":", 1)[1]) for addr, node in r.cluster_nodes().items() if "slave" in node["flags"]}
    expect(port not in replicas or port == master.port,
           "Это порт реплики. В ответе CLUSTER SLOTS для каждого диапазона слотов первым идёт мастер, "
           "за ним реплики; писать и читать стрим группой можно только на мастере.")
    expect(port == master.port,
           "Этот мастер не обслуживает слот ключа. Посчитайте слот ключа (CLUSTER KEYSLOT) и найдите в "
           "CLUSTER SLOTS диапазон, в который он попадает.")
    return (f"Верно: слот {r.keyslot(key)} обслуживает мастер на порту {port}. Весь стрим — один ключ, "
            "значит весь он на этом мастере, сколько бы записей в нём ни было.")


def _verify_dlq(ns: Mapping[str, object]) -> str:
    r, shard, dlq = cluster(ns), prefix_of(ns) + "ex:orders:{7}", ns["dlq_key"]
    if not (isinstance(dlq, str) and dlq):
        raise Miss("`dlq_key` должен быть строкой — именем стрима-DLQ.")
    expect(dlq.startswith(prefix_of(ns)), "Держите ключи упражнения под префиксом ноутбука: имя DLQ начинается с P.")
    expect(r.keyslot(dlq) == r.keyslot(shard),
           "DLQ в другом слоте, чем шард: скрипт с такими KEYS кластер не выполнит (CROSSSLOT). В слот "
           "ключа решает только hash tag — часть в фигурных скобках.")
    in_dlq = int(r.xlen(dlq)) if r.exists(dlq) else 0
    expect(in_dlq or int(r.xpending(shard, GROUP)["pending"]),
           "Запись шарда уже подтверждена прошлым вызовом `dead_letter` (с другим именем DLQ?), и в эту DLQ "
           "ей не попасть: выполните заново ячейку над решением (или `reset(\"09.2\")`), затем решение.")
    expect(in_dlq, "Имя подходит, но в DLQ нет записи: вызовите скрипт `dead_letter(dlq_key)` из готовящей ячейки.")
    expect(in_dlq == 1,
           "В DLQ больше одной записи — след прошлых попыток: выполните заново ячейку над решением (она начнёт "
           "с чистого шарда и DLQ) или `reset(\"09.2\")`, затем решение.")
    expect(int(r.xpending(shard, GROUP)["pending"]) == 0,
           "Запись всё ещё в PEL шарда: скрипт должен был подтвердить её (XACK) тем же вызовом.")
    return ("XACK и XADD в DLQ прошли одним скриптом: оба ключа несут тег {7}, значит один слот. Так "
            "устроены DLQ, аренда спасателя и метки дедупа каждого шарда воркера.")


def route_shards(r: RedisCluster, prefix: str) -> ShardSet:
    """The exercise's shards, as its preparing cell makes them (tags planned over the masters)."""
    stream = prefix + ROUTE_STREAM
    return ShardSet(stream, tuple(plan_tags(stream, 3, master_layout(r))))


def _verify_route(ns: Mapping[str, object]) -> str:
    r = cluster(ns)
    shards = route_shards(r, prefix_of(ns))
    expect(isinstance(ns["sent"], int), "`sent` должен быть числом — сколько событий отправлено.")
    where: dict[str, set[int]] = defaultdict(set)
    seqs: dict[str, list[int]] = defaultdict(list)
    for index, name in enumerate(shards.names):
        for _, fields in r.xrange(name):
            where[fields.get("order_id", "?")].add(index)
            seqs[fields.get("order_id", "?")].append(int(fields.get("seq", -1)))
    total = sum(len(v) for v in seqs.values())
    expect(total == ns["sent"] == ORDERS * PER_ORDER,
           f"В шардах {total} событий, а должно быть по {PER_ORDER} на каждый из {ORDERS} заказов, и "
           "`sent` должен совпасть с тем, что легло в шарды.")
    split = [o for o, indexes in where.items() if len(indexes) > 1]
    expect(not split, "События одного заказа разошлись по разным шардам: так порядок по заказу не удержать. "
                      "Шард выбирается по order_id, а не по номеру события или по кругу.")
    wrong = [o for o, indexes in where.items() if indexes != {shard_of(o, len(shards))}]
    expect(not wrong, "Заказы не там, где их будут искать продюсер и проверки: правило одно — "
                      "shard_of(order_id, число шардов), crc32 по модулю.")
    expect(all(s == sorted(s) for s in seqs.values()),
           "Внутри шарда события заказа идут не по порядку seq: отправляйте их по очереди.")
    return ("Каждый заказ целиком в своём шарде, в порядке отправки: воркер с дорожками по order_id спишет "
            "их по порядку, хотя шарды обрабатываются параллельно.")


def _verify_moved(ns: Mapping[str, object]) -> str:
    four, six = ns["moved_4"], ns["moved_6"]
    if not (isinstance(four, float | int) and isinstance(six, float | int) and all(0 <= v <= 1 for v in (four, six))):
        raise Miss("`moved_4` и `moved_6` — доли, числа от 0 до 1 (например 0.25).")
    ids = [f"order-{i}" for i in range(1000)]
    truth = {n: sum(shard_of(o, 3) != shard_of(o, n) for o in ids) / len(ids) for n in (4, 6)}
    expect(abs(four - truth[4]) < 1e-9,
           "`moved_4` не сходится: сравните shard_of(o, 3) и shard_of(o, 4) для каждого из 1000 order_id.")
    expect(abs(six - truth[6]) < 1e-9,
           "`moved_4` верно, `moved_6` нет: сравните shard_of(o, 3) и shard_of(o, 6).")
    return (f"Верно: при 4 шардах переезжают {four:.0%} заказов, при 6 — {six:.0%}. Каждое переехавшее "
            "событие может обогнать предыдущие события своего заказа, ждущие в старом шарде. Поэтому N "
            "фиксируют на всю жизнь стрима, а растут переносом шардов на новые мастера.")


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="09.1", title="Где живёт ключ", needs=("owner_port",), verify=_verify_owner,
        nudge=(
            "Кластер делит ключи по слотам, а слоты — по мастерам."
        ),
        hint=(
            "CLUSTER KEYSLOT даёт слот ключа; CLUSTER SLOTS (`r.cluster_slots()`) — диапазоны слотов с "
            "адресом мастера. Найдите диапазон, в котором лежит слот."
        ),
    ),
    Exercise(
        id="09.2", title="Скрипт в одном слоте", needs=("dlq_key",), verify=_verify_dlq,
        nudge=(
            "Скрипт может трогать ключи только одного слота; какой слот у `ex_shard` и у вашего имени "
            "DLQ?"
        ),
        hint=(
            "Сравните `r.keyslot` обоих имён. Хэшируется только то, что в первых фигурных скобках; имя "
            "DLQ воркера — `<стрим>:dlq`."
        ),
    ),
    Exercise(
        id="09.3", title="Маршрут по order_id", needs=("sent",), verify=_verify_route,
        nudge=(
            "Порядок по заказу держится, если все события заказа идут в один шард, и в том порядке, в "
            "каком возникли."
        ),
        hint=(
            "Шард заказа выбирает `route_shards.shard_for` (это `shard_of` по трём шардам); события "
            "каждого заказа пишите XADD по очереди, seq по возрастанию."
        ),
    ),
    Exercise(
        id="09.4", title="Сколько заказов переедет", needs=("moved_4", "moved_6"), verify=_verify_moved,
        nudge=(
            "Номер шарда — хэш order_id по модулю числа шардов; при смене числа шардов у кого меняется "
            "остаток?"
        ),
        hint=(
            "Для каждого order_id сравните `shard_of` при трёх шардах и при новом числе; доля — число "
            "изменившихся, делённое на число заказов."
        ),
    ),
)
