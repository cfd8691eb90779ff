-- take.lua: the second chance. Takes units from a shard that is NOT the user's home, while
-- the home shard holds the user's count. Only stock and the record: limit and replay were
-- settled on the home shard under the hold.
--
-- KEYS[1] stock slice    {T}:stock:<sku>
-- KEYS[2] shard meta     {T}:meta:<sku>      (`gen`: the rebuild generation, copied into
--                                             the record)
-- KEYS[3] claims stream  {T}:claims
-- ARGV[1] sku   ARGV[2] user   ARGV[3] qty   ARGV[4] now_ms   ARGV[5] user_seq (from the hold)
-- ARGV[6] home shard   ARGV[7] request id or ""   ARGV[8] this shard id
-- ARGV[9] take deadline, ms on Redis's clock: the hold's expiry minus a safety margin
-- ARGV[10] the home shard's rebuild generation when the hold was placed (claim.lua's reply)
-- Numbers and the events channel as in claim.lua (its header says why).
-- Returns (never nil):
--   {1, claim_id, remaining}   CLAIMED
--   {10, remaining}            SOLD_OUT on this shard
--   {12} NOT_STARTED   {13} ENDED   {14} NOT_PREHEATED   {15} BAD_ARGUMENT
--   {16} HOLD_EXPIRED: too late to take under this hold; nothing was taken

-- qty is written as is into the record: a u32 from the caller, checked only for >= 1 (the
-- caller is shard-router's take, which formats it). Anything that is not a number is an
-- error with nothing written (arithmetic on such a string).
local qty = ARGV[3] + 0
local now = ARGV[4] + 0
local deadline = ARGV[9] + 0
local hold_gen = ARGV[10] + 0
if qty < 1 then
  return {15}
end
-- Once a hold is past its expiry, the consumer may resolve it as "nothing taken" and give
-- the user's count back. A take that runs after that (a gateway or Redis stalled for the
-- whole hold TTL) would hand out a unit the count no longer shows, so it is refused well
-- before the expiry, by Redis's clock, whatever the gateway's clock said when it sent it.
local t = redis.call('TIME')
if t[1] * 1000 + math.floor(t[2] / 1000) > deadline then
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
if (meta[3] or 0) + 0 > hold_gen then
  return {16}
end
if now < meta[1] + 0 then
  return {12}
end
if now >= meta[2] + 0 then
  return {13}
end
stock = stock + 0
if stock < qty then
  return {10, stock}
end
local remaining = redis.call('DECRBY', KEYS[1], ARGV[3])
-- The claim record as claim.lua writes it (version 1, field `c1`), qty as the caller wrote it.
local id = redis.call('XADD', KEYS[3], '*', 'c1', ARGV[1] .. ',' .. ARGV[3] .. ',' .. ARGV[5] .. ','
  .. ARGV[8] .. ',' .. ARGV[6] .. ',' .. ARGV[4] .. ',' .. (meta[3] or '0') .. ','
  .. #ARGV[2] .. ',' .. ARGV[2] .. ARGV[7])
if remaining == 0 then
  redis.call('PUBLISH', 'fg:events', 'empty ' .. ARGV[1] .. ' ' .. ARGV[8])
end
return {1, ARGV[8] .. '-' .. id, remaining}
