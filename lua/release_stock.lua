-- release_stock.lua: returns a released claim's units to the slice it was taken from,
-- exactly once per claim id, and publishes `restock` when the slice was empty.
--
-- KEYS[1] stock slice          {T}:stock:<sku>
-- KEYS[2] released claim ids   {T}:relstock:<sku>
-- ARGV[1] claim id   ARGV[2] qty   ARGV[3] sku   ARGV[4] this shard id   ARGV[5] events channel
-- Returns (never nil):
--   {40, slice}   RELEASED: units are back
--   {41}          ALREADY_RELEASED: nothing changed
--   {14}          NOT_PREHEATED: slice missing; nothing changed (never recreated)
--   {15}          BAD_ARGUMENT

local qty = tonumber(ARGV[2])
if not qty or qty < 1 then
  return {15}
end
if not redis.call('GET', KEYS[1]) then
  return {14}
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return {41}
end
local slice = redis.call('INCRBY', KEYS[1], qty)
if slice == qty then
  redis.call('PUBLISH', ARGV[5], 'restock ' .. ARGV[3] .. ' ' .. ARGV[4])
end
return {40, slice}
