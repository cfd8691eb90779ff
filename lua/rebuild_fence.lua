-- rebuild_fence.lua: first step of a rebuild from the ledger, on one shard of a SKU.
-- Puts the rebuild's token (with a lease) in the shard meta and removes the stock slice:
-- from then on claim.lua, take.lua and release_stock.lua answer NOT_PREHEATED on this
-- shard and change nothing, and preheat.lua refuses, until rebuild.lua writes the shard
-- back under the same token. A missing slice is already "not preheated" for every script,
-- so the fence costs the claim path nothing.
--
-- KEYS[1] stock slice   {T}:stock:<sku>
-- KEYS[2] shard meta    {T}:meta:<sku>   field `rebuild` = "<token>|<lease expiry ms>"
-- ARGV[1] token (no '|')   ARGV[2] lease ms (>= 1)
-- Returns (never nil):
--   {50, slice}             FENCED: slice before the fence, -1 when it was missing
--   {51, holder, expires}   BUSY: another rebuild's lease runs until `expires` (Redis ms)
--   {15}                    BAD_ARGUMENT
-- The lease is measured on Redis's clock, so rebuilds on different hosts agree on it.

local lease = tonumber(ARGV[2])
if not lease or lease < 1 or ARGV[1] == '' or string.find(ARGV[1], '|', 1, true) then
  return {15}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('HGET', KEYS[2], 'rebuild')
if held then
  local holder, expires = string.match(held, '^([^|]+)|(%d+)$')
  if holder and holder ~= ARGV[1] and tonumber(expires) > now then
    return {51, holder, tonumber(expires)}
  end
end
redis.call('HSET', KEYS[2], 'rebuild', ARGV[1] .. '|' .. (now + lease))
local slice = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
return {50, tonumber(slice or '-1')}
