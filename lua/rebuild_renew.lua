-- rebuild_renew.lua: extends the lease of a rebuild fence (lua/rebuild_fence.lua) while the
-- rebuild that holds it is still reading the ledger. Unlike the fence it never touches the
-- slice, so renewing a shard the rebuild already wrote back (fence lifted) changes nothing.
--
-- KEYS[1] shard meta   {T}:meta:<sku>   field `rebuild` = "<token>|<lease expiry ms>"
-- ARGV[1] token   ARGV[2] lease ms (>= 1)
-- Returns (never nil):
--   {50}   RENEWED: the lease now runs `lease` ms from now (Redis clock)
--   {61}   FENCE_LOST: this token does not hold the shard (taken over, or already written)
--   {15}   BAD_ARGUMENT

local lease = tonumber(ARGV[2])
if not lease or lease < 1 or ARGV[1] == '' or string.find(ARGV[1], '|', 1, true) then
  return {15}
end
local held = redis.call('HGET', KEYS[1], 'rebuild')
if not held or string.match(held, '^([^|]+)|') ~= ARGV[1] then
  return {61}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'rebuild', ARGV[1] .. '|' .. (now + lease))
return {50}
