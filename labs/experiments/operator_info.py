"""INFO as an operator reads it, and LATENCY / SLOWLOG after a command that really stalls Redis.

:func:`operator_view` picks from ``INFO`` the fields an on-call person looks at first, by
section, each with what it means and which exporter metric carries it (so the notebook can put
the two side by side). :func:`stall` runs a Lua busy loop of a given length (Redis is single
threaded: every client waits meanwhile), which lands in ``SLOWLOG`` and, with
``latency-monitor-threshold`` set, in ``LATENCY LATEST``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from labs.launcher.process import command

# (INFO section, field, exporter metric, what it tells the operator: in Russian, the notebook shows it as is)
FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("memory", "used_memory", "redis_memory_used_bytes",
     "байты данных и буферов; с maxmemory сравнивается это число минус mem_not_counted_for_evict"),
    ("memory", "used_memory_peak", "redis_memory_used_peak_bytes", "наибольший used_memory с запуска"),
    ("memory", "maxmemory", "redis_memory_max_bytes", "предел; 0 — предела нет (доля от него бессмысленна)"),
    ("memory", "maxmemory_policy", "redis_instance_info{maxmemory_policy}", "что происходит у предела"),
    ("memory", "mem_fragmentation_ratio", "redis_mem_fragmentation_ratio", "RSS / used: >1,5 — RAM впустую, <1 — своп"),
    ("memory", "mem_fragmentation_bytes", "redis_mem_fragmentation_bytes", "RSS − used: размер, который и важен"),
    ("memory", "allocator_frag_ratio", "redis_allocator_frag_ratio",
     "active / allocated аллокатора: настоящая фрагментация"),
    ("memory", "allocator_frag_bytes", "redis_allocator_frag_bytes", "байты в полупустых страницах (RedisFragmented)"),
    ("clients", "connected_clients", "redis_connected_clients", "открытые соединения (воркеры, продюсеры, утилиты)"),
    ("clients", "blocked_clients", "redis_blocked_clients", "клиенты, ждущие в XREADGROUP BLOCK и подобных"),
    ("stats", "rejected_connections", "redis_rejected_connections_total", "соединения, отвергнутые на maxclients"),
    ("stats", "evicted_keys", "redis_evicted_keys_total", "ключи, удалённые ради места (стрим — один ключ)"),
    ("stats", "total_error_replies", "redis_total_error_replies", "ответы-ошибки всех видов (OOM среди них)"),
    ("replication", "role", "redis_instance_info{role}", "master или slave"),
    ("replication", "connected_slaves", "redis_connected_slaves", "реплики, подключённые к этому мастеру"),
    ("replication", "master_repl_offset", "redis_master_repl_offset", "байты потока репликации с начала"),
    ("persistence", "aof_enabled", "redis_aof_enabled", "AOF включён (1) или нет (0)"),
    ("persistence", "aof_last_write_status", "redis_aof_last_write_status", "ok или err, если диск отказал"),
    ("persistence", "rdb_last_bgsave_status", "redis_rdb_last_bgsave_status", "итог последнего снимка"),
    ("persistence", "rdb_changes_since_last_save", "redis_rdb_changes_since_last_save",
     "записи после последнего снимка RDB (падение теряет их, только если нет AOF)"),
)


@dataclass(frozen=True)
class Row:
    section: str
    field: str
    value: Any
    metric: str
    meaning: str


def operator_view(client: redis.Redis) -> list[Row]:
    """The fields of :data:`FIELDS` from one ``INFO`` call (``-`` where this server has none)."""
    info = client.info("everything")
    return [Row(section, name, info.get(name, "-"), metric, meaning) for section, name, metric, meaning in FIELDS]


STALL_SCRIPT = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
local n = 0
while true do
  n = n + 1
  if n % 1000 == 0 then
    local now = redis.call('TIME')
    if now[1] * 1000000 + now[2] - start >= tonumber(ARGV[1]) then
      return n
    end
  end
end
"""


@dataclass(frozen=True)
class Stall:
    stall_ms: float  # what the client measured
    latency_latest: list[Any]  # LATENCY LATEST after it
    slowlog: list[dict[str, Any]]  # SLOWLOG GET after it


def stall(client: redis.Redis, stall_ms: int, *, latency_threshold_ms: int = 100) -> Stall:
    """Enable the latency monitor above ``latency_threshold_ms``, busy-loop for ``stall_ms`` in Lua, read both logs.

    ``slowlog-log-slower-than`` stays at its default (10 ms), which such a stall exceeds.
    """
    client.config_set("latency-monitor-threshold", latency_threshold_ms)
    started = time.perf_counter()
    client.eval(STALL_SCRIPT, 0, stall_ms * 1000)
    measured_ms = (time.perf_counter() - started) * 1000
    latest = command(client, "LATENCY", "LATEST")
    return Stall(measured_ms, list(latest), list(client.slowlog_get(5)))
