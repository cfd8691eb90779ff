-- draw_close.lua: closes one shard's entries for the draw and reads its top-K, in one
-- atomic step: no entry lands on this shard after the list it returns.
--
-- KEYS[1] draw meta   {T}:draw:<sku>   KEYS[2] entrants {T}:entrants:<sku>
-- KEYS[3] top-K       {T}:topk:<sku>
-- Returns (never nil):
--   {90, state, entrants, user1, prio1, user2, prio2, ...}  the top-K in draw order, and
--                     how many users entered on this shard (the service waits for the
--                     ledger to hold as many before it draws)
--   {14}              NOT_PREHEATED

local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return {14}
end
if state == 'open' then
  redis.call('HSET', KEYS[1], 'state', 'closed')
  state = 'closed'
end
local out = {90, state, redis.call('HLEN', KEYS[2])}
local top = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #top do
  out[#out + 1] = top[i]
end
return out
