-- wave.lua: adds one stock wave's share to one shard's slice, exactly once per wave id, and
-- publishes `restock` so gateways that cached "sold out" try again.
-- The shard's debt (units sold beyond the slice, see rebuild_late.lua) is paid first: the
-- wave's units stand for those sold already, so only the rest goes on sale. The wave hash
-- still records every unit of the share (they are released stock, which reconciliation
-- counts; the debt it counts went down by what was paid).
--
-- KEYS[1] stock slice      {T}:stock:<sku>
-- KEYS[2] applied waves    {T}:waves:<sku>    hash: wave id -> units added here
-- KEYS[3] debt             {T}:debt:<sku>     (absent = 0)
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
local slice = redis.call('GET', KEYS[1])
if not slice then
  return {14}
end
if redis.call('HSETNX', KEYS[2], ARGV[1], units) == 0 then
  return {71}
end
local debt = tonumber(redis.call('GET', KEYS[3]) or '0')
local added = units
if debt > 0 and units > 0 then
  local paid = math.min(debt, units)
  added = units - paid
  if paid == debt then
    redis.call('DEL', KEYS[3])
  else
    redis.call('DECRBY', KEYS[3], paid)
  end
end
if added == 0 then
  return {70, tonumber(slice)}
end
slice = redis.call('INCRBY', KEYS[1], added)
redis.call('PUBLISH', ARGV[5], 'restock ' .. ARGV[3] .. ' ' .. ARGV[4])
return {70, slice}
