"""labs.exercises.nb03: the RDB-only, WAIT-after-the-cut and hash-tag checks, right and wrong.

03.1 runs the notebook's reference cell once on a real throwaway server (a second); the other
cases put the records in place by hand. A server left running under the exercise's directory is
caught by the check (a real ``redis-server`` here too).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import redis
from exercise_support import namespace, passes, says, solved, verdict

from labs.experiments.persistence import count_present, write_acknowledged
from labs.experiments.replication import wait_replicas
from labs.launcher import ports, topologies
from labs.launcher.process import RedisProcess

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ns(redis_client: redis.Redis, key_prefix: str, redis_url: str, tmp_path: Path) -> dict[str, Any]:
    return namespace(
        redis_client, key_prefix, redis_url, RUN_DIR=tmp_path, topologies=topologies,
        write_acknowledged=write_acknowledged, count_present=count_present, wait_replicas=wait_replicas,
    )  # fmt: skip


def ids(n: int, start: int = 0) -> list[str]:
    return [f"1-{i}" for i in range(start, start + n)]


def rdb(ns: dict[str, Any], kept: Any, lost: Any) -> dict[str, Any]:
    return {**ns, "snapshot_ids": ids(1000), "later_ids": ids(500, 1000), "rdb_before_snapshot": kept,
            "rdb_after_snapshot": lost}  # fmt: skip


def test_rdb_only_passes_with_the_reference_run(ns: dict[str, Any]) -> None:
    assert "пока не определены" in verdict("03.1", ns).message
    assert "До снимка — 1000 из 1000 на месте, после снимка — 0 из 500" in passes("03.1", solved("03.1", ns))


@pytest.mark.parametrize(
    ("kept", "lost", "fragment"),
    [
        (0, 0, "снимка не было"),
        (600, 0, "Вернулась только часть"),
        (1000, 500, "остановили вежливо"),
        (1000, 200, "вернулась часть"),
        (1000, 900, "Найдено больше, чем записано"),
        (1000, "0", "должна быть числом"),
    ],
)
def test_rdb_only_names_what_went_wrong(kept: Any, lost: Any, fragment: str, ns: dict[str, Any]) -> None:
    says("03.1", rdb(ns, kept, lost), fragment)


def test_rdb_only_wants_its_server_stopped(ns: dict[str, Any]) -> None:
    home = ns["RUN_DIR"] / "ex-rdb" / "single"
    home.mkdir(parents=True)
    port = ports.free_port()
    proc = RedisProcess(f"redis-{port}", port, home, shutil.which("redis-server") or "redis-server")
    proc.conf.write_text(f'port {port}\nbind 127.0.0.1\ndir "{proc.data_dir}"\nsave ""\n')
    proc.start("a free port")
    try:
        says("03.1", rdb(ns, 1000, 0), "Серверы опыта всё ещё работают")
    finally:
        proc.kill()
    passes("03.1", rdb(ns, 1000, 0))
    says("03.1", {**rdb(ns, 1000, 0), "later_ids": ids(5)}, "меньше 100 ID")


def wait(ns: dict[str, Any], reply: Any, waited_ms: Any, on_replica: Any) -> dict[str, Any]:
    return {**ns, "cut_tail_ids": ids(20), "tail_wait": reply, "tail_wait_ms": waited_ms, "tail_on_replica": on_replica}


def test_wait_after_the_cut_judges_the_reply_the_time_and_the_replica(ns: dict[str, Any]) -> None:
    assert "пока не определены" in verdict("03.2", ns).message
    assert "через 3.2 мс" in passes("03.2", wait(ns, 1, 3.2, 20))
    says("03.2", wait(ns, 0, 200, 20), "`WAIT` вернул 0")
    says("03.2", wait(ns, 2, 1, 20), "здесь реплика одна")
    says("03.2", wait(ns, 1, 9000, 20), "вне таймаута")
    says("03.2", wait(ns, 1, 3, 12), "не все записи разреза")
    says("03.2", {**wait(ns, 1, 3, 20), "cut_tail_ids": "1-0"}, "списком ID")


def test_hash_tags_are_judged_by_crc16_without_naming_the_wrong_key(ns: dict[str, Any]) -> None:
    right = {"user:{42}:cart": True, "user:{42}:orders": True, "{}{42}": False, "{42}{}": True}
    assert "`{}{42}` — ловушка" in passes("03.3", {**ns, "same_slot_as_42": right})
    wrong = {**right, "{}{42}": True}
    result = verdict("03.3", {**ns, "same_slot_as_42": wrong})
    assert not result.passed and "для 1 из 4 ключей" in result.message and "{}{42}" not in result.message
    says("03.3", {**ns, "same_slot_as_42": {"42": True}}, "ровно эти ключи")
    says("03.3", {**ns, "same_slot_as_42": dict.fromkeys(right, 1)}, "`True` или `False`")
    says("03.3", {**ns, "same_slot_as_42": list(right)}, "словарём")
