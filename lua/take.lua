-- take.lua: the second chance. Takes units from a shard that is NOT the user's home, while
-- the home shard holds the user's count. Only stock and the record: limit and replay were
-- settled on the home shard under the hold.
--
-- KEYS[1] stock slice    {T}:stock:<sku>
-- KEYS[2] shard meta     {T}:meta:<sku>      (`gen`: the rebuild generation, copied into
--                                             the record)
-- KEYS[3] claims stream  {T}:claims
-- ARGV[1] sku   ARGV[2] user   ARGV[3] qty   ARGV[4] now_ms   ARGV[5] user_seq (from the hold)
-- ARGV[6] home shard   ARGV[7] request id or ""   ARGV[8] this shard id   ARGV[9] events channel
-- ARGV[10] take deadline, ms on Redis's clock: the hold's expiry minus a safety margin
-- ARGV[11] the home shard's rebuild generation when the hold was placed (claim.lua's reply)
-- Returns (never nil):
--   {1, claim_id, remaining}   CLAIMED
--   {10, remaining}            SOLD_OUT on this shard
--   {12} NOT_STARTED   {13} ENDED   {14} NOT_PREHEATED   {15} BAD_ARGUMENT
--   {16} HOLD_EXPIRED: too late to take under this hold; nothing was taken

local qty = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local deadline = tonumber(ARGV[10])
local hold_gen = tonumber(ARGV[11])
if not qty or qty < 1 or not now or not deadline or not hold_gen then
  return {15}
end
-- Once a hold is past its expiry, the consumer may resolve it as "nothing taken" and give
-- the user's count back. A take that runs after that (a gateway or Redis stalled for the
-- whole hold TTL) would hand out a unit the count no longer shows, so it is refused well
-- before the expiry, by Redis's clock, whatever the gateway's clock said when it sent it.
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline then
  return {16}
end
local meta = redis.call('HMGET', KEYS[2], 'start', 'end', 'gen')
local stock = redis.call('GET', KEYS[1])
if not stock or not meta[1] then
  return {14}
end
-- A hold placed before the campaign was rebuilt from the ledger may be gone with the data
-- Redis lost, and the rebuilt user count cannot know it: such a take is refused. Every
-- rebuild writes a new generation into every shard of the SKU (lua/rebuild.lua), so a
-- hold from an older one is from before it, whatever any clock says.
if tonumber(meta[3] or '0') > hold_gen then
  return {16}
end
if now < tonumber(meta[1]) then
  return {12}
end
if now >= tonumber(meta[2]) then
  return {13}
end
stock = tonumber(stock)
if stock < qty then
  return {10, stock}
end
local remaining = redis.call('DECRBY', KEYS[1], qty)
-- The claim record as claim.lua writes it (version 1, field `c1`). `qty` is the client's
-- u32, which `..` writes whole (anything else is poison to every reader).
local id = redis.call('XADD', KEYS[3], '*', 'c1', ARGV[1] .. ',' .. qty .. ',' .. ARGV[5] .. ','
  .. ARGV[8] .. ',' .. ARGV[6] .. ',' .. ARGV[4] .. ',' .. (meta[3] or '0') .. ','
  .. #ARGV[2] .. ',' .. ARGV[2] .. ARGV[7])
if remaining == 0 then
  redis.call('PUBLISH', ARGV[9], 'empty ' .. ARGV[1] .. ' ' .. ARGV[8])
end
return {1, ARGV[8] .. '-' .. id, remaining}
