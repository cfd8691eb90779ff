-- settle.lua: ends a hold on the user's HOME shard. Keep it when the second chance took
-- units (the count already includes them), undo it when it did not. Also used by the
-- consumer to resolve holds a crashed gateway left behind, after checking the ledger.
--
-- KEYS[1] user counts     {T}:users:<sku>
-- KEYS[2] holds           {T}:holds:<sku>     hash: "user|seq" -> "qty|expires_ms:gen|request_id"
-- KEYS[3] request result  {T}:req:<sku>:<len>:<user>:<rid>  (unused when ARGV[4] == "")
-- KEYS[4] shard meta      {T}:meta:<sku>  (not read)
-- ARGV[1] user   ARGV[2] user_seq   ARGV[3] "keep" | "undo" | "final"   ARGV[4] request id or ""
-- ARGV[5] stored answer "claim_id|shard|qty" (keep: "~" first while the take on another
-- shard is unconfirmed; final: without)   ARGV[6] request result ttl s
-- ARGV[7] (keep, undo) the name of the caller's hold: the rebuild generation it was placed
-- under (claim.lua's reply to the gateway, the hold's own value to the consumer), or ""
-- (any hold of this user|seq). A hold of another generation answers HOLD_GONE: after a
-- loss a user's sequence starts again, so a retry's hold can take the `user|seq` of a
-- stalled attempt's lost hold, and neither the stalled attempt (found by the model
-- checker, model/) nor a resolution decided on the lost hold may settle the retry's.
-- "final" touches no hold: it drops the "~" once the take is on a replica or in the ledger
-- (shard-router/src/replay.rs), also over a "P" (the consumer may commit the record before
-- the gateway settles; keep then leaves the final answer alone).
-- Returns (never nil):
--   {30, qty}   SETTLED (final: {30, 0}, the answer is final now)
--   {31}        HOLD_GONE: no such hold (already settled or resolved); final: not this answer
--   {15}        BAD_ARGUMENT

if ARGV[3] == 'final' then
  local seen = redis.call('GET', KEYS[3])
  if seen ~= 'P' and seen ~= '~' .. ARGV[5] then
    return {31}
  end
  redis.call('SET', KEYS[3], ARGV[5], 'KEEPTTL')
  return {30, 0}
end

local field = ARGV[1] .. '|' .. ARGV[2]
local hold = redis.call('HGET', KEYS[2], field)
if not hold then
  return {31}
end
-- One match reads the hold's qty and generation (numbers by arithmetic, as claim.lua says).
local qty, gen = string.match(hold, '^(%d+)|%-?%d+:(%d+)|')
if not qty or (ARGV[3] ~= 'keep' and ARGV[3] ~= 'undo') then
  return {15}
end
qty = qty + 0
if ARGV[7] and ARGV[7] ~= '' then
  local named = tonumber(ARGV[7])
  if not named then
    return {15}
  end
  if gen + 0 ~= named then
    return {31}
  end
end
redis.call('HDEL', KEYS[2], field)
if ARGV[3] == 'keep' then
  if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= (string.gsub(ARGV[5], '^~', '')) then
    redis.call('SET', KEYS[3], ARGV[5], 'EX', ARGV[6])
  end
else
  if redis.call('HINCRBY', KEYS[1], ARGV[1], -qty) <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[1])
  end
  if ARGV[4] ~= '' then
    redis.call('DEL', KEYS[3])
  end
end
return {30, qty}
