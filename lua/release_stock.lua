-- release_stock.lua: returns a released claim's units to the slice it was taken from,
-- exactly once per claim id, and publishes `restock` when the slice was empty.
-- The shard's debt (units sold beyond the slice, see rebuild_late.lua) is paid first: those
-- units are sold to someone else already, so only what is left after the debt goes back on
-- sale. Paying and growing happen in the step that adds the claim id to the release set,
-- so a retried release pays nothing twice.
--
-- KEYS[1] stock slice          {T}:stock:<sku>
-- KEYS[2] released claim ids   {T}:relstock:<sku>
-- KEYS[3] debt                 {T}:debt:<sku>   (absent = 0)
-- ARGV[1] claim id   ARGV[2] qty   ARGV[3] sku   ARGV[4] this shard id   ARGV[5] events channel
-- Returns (never nil):
--   {40, slice}   RELEASED: units are back (or paid the debt)
--   {41}          ALREADY_RELEASED: nothing changed
--   {14}          NOT_PREHEATED: slice missing; nothing changed (never recreated)
--   {15}          BAD_ARGUMENT

local qty = tonumber(ARGV[2])
if not qty or qty < 1 then
  return {15}
end
local slice = redis.call('GET', KEYS[1])
if not slice then
  return {14}
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return {41}
end
local debt = tonumber(redis.call('GET', KEYS[3]) or '0')
local back = qty
if debt > 0 then
  local paid = math.min(debt, qty)
  back = qty - paid
  if paid == debt then
    redis.call('DEL', KEYS[3])
  else
    redis.call('DECRBY', KEYS[3], paid)
  end
end
if back == 0 then
  return {40, tonumber(slice)}
end
slice = redis.call('INCRBY', KEYS[1], back)
if slice == back then
  redis.call('PUBLISH', ARGV[5], 'restock ' .. ARGV[3] .. ' ' .. ARGV[4])
end
return {40, slice}
