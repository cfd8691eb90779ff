-- preheat.lua: writes one shard's stock slice and its copy of limit and window.
-- Never overwrites a live slice: a slice that exists keeps its value (units may already be
-- sold from it); only limit and window are updated then. Refuses while a rebuild from
-- the ledger holds the shard (rebuild_fence.lua): the full split would undo its work.
--
-- KEYS[1] stock slice   {T}:stock:<sku>
-- KEYS[2] shard meta    {T}:meta:<sku>
-- ARGV[1] slice units (>= 0)   ARGV[2] per-user limit (>= 1)   ARGV[3] start_ms   ARGV[4] end_ms
-- Returns (never nil):
--   {20, slice}      PREHEATED: slice written
--   {21, current}    LIVE: slice existed and was left as it is
--   {22}             REBUILDING: a rebuild's fence is up; nothing changed
--   {15}             BAD_ARGUMENT

local slice = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if not slice or slice < 0 or not limit or limit < 1
  or not tonumber(ARGV[3]) or not tonumber(ARGV[4]) then
  return {15}
end
if redis.call('HEXISTS', KEYS[2], 'rebuild') == 1 then
  return {22}
end
redis.call('HSET', KEYS[2], 'limit', ARGV[2], 'start', ARGV[3], 'end', ARGV[4])
local current = redis.call('GET', KEYS[1])
if current then
  return {21, tonumber(current)}
end
redis.call('SET', KEYS[1], slice)
return {20, slice}
