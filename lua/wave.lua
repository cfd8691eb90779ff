-- wave.lua: adds one stock wave's share to one shard's slice, exactly once per wave id, and
-- publishes `restock` so gateways that cached "sold out" try again.
--
-- KEYS[1] stock slice      {T}:stock:<sku>
-- KEYS[2] applied waves    {T}:waves:<sku>    hash: wave id -> units added here
-- ARGV[1] wave id   ARGV[2] units (>= 0)   ARGV[3] sku   ARGV[4] this shard id
-- ARGV[5] events channel
-- Returns (never nil):
--   {70, slice}   ADDED
--   {71}          ALREADY_ADDED: this wave is in this slice already; nothing changed
--   {14}          NOT_PREHEATED: slice missing; nothing changed (never created here)
--   {15}          BAD_ARGUMENT

local units = string.match(ARGV[2], '^%d+$') and tonumber(ARGV[2])
if not units or ARGV[1] == '' then
  return {15}
end
if not redis.call('GET', KEYS[1]) then
  return {14}
end
if redis.call('HSETNX', KEYS[2], ARGV[1], units) == 0 then
  return {71}
end
local slice = redis.call('INCRBY', KEYS[1], units)
if units > 0 then
  redis.call('PUBLISH', ARGV[5], 'restock ' .. ARGV[3] .. ' ' .. ARGV[4])
end
return {70, slice}
