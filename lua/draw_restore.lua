-- draw_restore.lua: puts entries the ledger holds back into one shard after Redis lost
-- them (the entrants and the bounded top-K). An entrant already here keeps its value: it
-- may be a rank or a win written since, or a fresh entry of the same user.
--
-- KEYS[1] draw meta {T}:draw:<sku>   KEYS[2] entrants {T}:entrants:<sku>   KEYS[3] top-K
-- ARGV[1] the restore's token (draw_open.lua `held`): the call counts itself in the hold
-- ARGV[2..] user, priority, entry id triples
-- Returns (never nil): {92, restored}   {14} NOT_PREHEATED (not held under this token)

local m = redis.call('HMGET', KEYS[1], 'k', 'hold')
local k = tonumber(m[1])
if not k or m[2] ~= ARGV[1] then
  return {14}
end
redis.call('HINCRBY', KEYS[1], 'hn', 1)
local restored = 0
for i = 2, #ARGV, 3 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], 'E|' .. ARGV[i + 2]) == 1 then
    restored = restored + 1
  end
  redis.call('ZADD', KEYS[3], ARGV[i + 1], ARGV[i])
end
local over = redis.call('ZCARD', KEYS[3]) - k
if over > 0 then
  redis.call('ZPOPMAX', KEYS[3], over)
end
return {92, restored}
