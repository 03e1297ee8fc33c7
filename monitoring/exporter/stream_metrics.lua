#!lua flags=no-writes
-- Stream metrics that prometheus-redis-exporter 1.45 does not export, for its -script option.
--
-- 1.45's -check-streams gives each group's pending count, last delivered id and consumers' idle
-- time, but not the group's lag in entries, nor anything about the age of its pending entries.
-- This script adds, per consumer group of every stream matching PATTERNS:
--
--   group_lag_entries;<stream>;<group>     XINFO GROUPS "lag" (Redis >= 7.0; absent when Redis
--                                          cannot tell, e.g. after XDEL past the group)
--   oldest_pending_id_ms;<stream>;<group>  the millisecond part of the oldest pending id (XPENDING)
--   pending_max_idle_ms;<stream>;<group>   the largest idle time among the 100 oldest pending entries
--
-- The exporter runs it with EVAL on every scrape and serves each pair as
-- redis_script_values{key="<name>;<stream>;<group>"}; monitoring/rules/streams.yml turns them back
-- into labelled series (stream_group:lag_entries, ...).
--
-- The first line declares the script read-only (Redis >= 7.0). Without it EVAL counts as a write:
-- during a SENTINEL FAILOVER the old master pauses writes (CLIENT PAUSE WRITE), the exporter's
-- EVAL waits out the pause, its scrape times out, and redis_up 0 raises RedisDown on a planned
-- failover. With it the script also runs on replicas.
--
-- Cost: one SCAN over the keyspace per pattern and scrape, plus XINFO and two XPENDING per group.
-- Fine for a lab and for a broker instance with few keys; on a large shared instance list the
-- streams by name (a pattern without "*" still costs a SCAN here: replace the loop by the names).

local PATTERNS = {"*orders", "*orders:dlq", "*orders:{*}", "*orders:{*}:dlq"}  -- replaced by labs.launcher.monitoring from its settings

local out = {}

local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then
      return flat[i + 1]
    end
  end
  return nil
end

local function report(name, stream, group, value)
  table.insert(out, name .. ";" .. stream .. ";" .. group)
  table.insert(out, tostring(value))
end

local function group_metrics(stream, group)
  local lag = field(group, "lag")
  local name = field(group, "name")
  if lag then
    report("group_lag_entries", stream, name, lag)
  end
  local summary = redis.call("XPENDING", stream, name)
  if summary[1] > 0 then
    report("oldest_pending_id_ms", stream, name, string.match(summary[2], "^(%d+)"))
    local max_idle = 0
    for _, entry in ipairs(redis.call("XPENDING", stream, name, "-", "+", 100)) do
      if entry[3] > max_idle then
        max_idle = entry[3]
      end
    end
    report("pending_max_idle_ms", stream, name, max_idle)
  end
end

local seen = {}
for _, pattern in ipairs(PATTERNS) do
  local cursor = "0"
  repeat
    local reply = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000, "TYPE", "stream")
    cursor = reply[1]
    for _, stream in ipairs(reply[2]) do
      if not seen[stream] then
        seen[stream] = true
        for _, group in ipairs(redis.call("XINFO", "GROUPS", stream)) do
          group_metrics(stream, group)
        end
      end
    end
  until cursor == "0"
end

return out
