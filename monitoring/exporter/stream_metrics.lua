#!lua flags=no-writes
-- Stream metrics that prometheus-redis-exporter 1.45 does not export, for its -script option.
--
-- 1.45's -check-streams gives each group's pending count, last delivered id and consumers' idle
-- time, but not the group's lag in entries, nor anything about the age of its pending entries.
-- This script adds, per consumer group of every stream matching PATTERNS:
--
--   group_lag_entries;<stream>;<group>     XINFO GROUPS "lag" as Redis reports it (>= 7.0; absent
--                                          when Redis cannot tell, e.g. after XDEL of an entry the
--                                          group has not read). After a trim past the group's
--                                          cursor (MAXLEN, MINID) it is NOT absent: it still counts
--                                          the trimmed entries, and on 7.0 stays above 0 after the
--                                          group has read all that is left (notebook 07, section 5)
--   group_caught_up;<stream>;<group>       1 when the group's last delivered id is the stream's last
--                                          generated id (nothing left to deliver, whatever "lag"
--                                          says), else 0: the rules zero the lag with it
--   oldest_pending_id_ms;<stream>;<group>  the millisecond part of the oldest pending id (XPENDING)
--   pending_max_idle_ms;<stream>;<group>   the largest idle time among the 100 oldest pending entries
--
-- The exporter runs it with EVAL on every scrape and serves each pair as
-- redis_script_values{key="<name>;<stream>;<group>"}; monitoring/rules/streams.yml turns them back
-- into labelled series (stream_group:lag_entries, ...).
--
-- The first line declares the script read-only (Redis >= 7.0): it may run on a replica and while
-- writes are paused (the FAILOVER command and CLUSTER FAILOVER pause clients with CLIENT PAUSE
-- WRITE; SENTINEL FAILOVER does not, and a plain EVAL ran through it on 7.0.15 unharmed), and
-- Redis refuses it any write, so a scrape can never change the data it watches.
--
-- Cost: one SCAN over the keyspace per pattern and scrape, XINFO STREAM per stream, plus XINFO
-- GROUPS and two XPENDING per group.
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

-- Stream ids "<ms>-<seq>" compared as numbers (a millisecond fits a Lua double exactly).
local function id_at_least(id, other)
  local ms, seq = string.match(id, "^(%d+)-(%d+)$")
  local other_ms, other_seq = string.match(other, "^(%d+)-(%d+)$")
  ms, seq, other_ms, other_seq = tonumber(ms), tonumber(seq), tonumber(other_ms), tonumber(other_seq)
  return ms > other_ms or (ms == other_ms and seq >= other_seq)
end

local function group_metrics(stream, last_generated, group)
  local lag = field(group, "lag")
  local name = field(group, "name")
  if lag then
    report("group_lag_entries", stream, name, lag)
  end
  report("group_caught_up", stream, name, id_at_least(field(group, "last-delivered-id"), last_generated) and 1 or 0)
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
        local last_generated = field(redis.call("XINFO", "STREAM", stream), "last-generated-id")
        for _, group in ipairs(redis.call("XINFO", "GROUPS", stream)) do
          group_metrics(stream, last_generated, group)
        end
      end
    end
  until cursor == "0"
end

return out
