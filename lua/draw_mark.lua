-- draw_mark.lua: writes the draw's ranks of one shard's entrants, and with the last batch
-- the state `drawn`, after which draw_enter.lua answers each entrant's standing.
-- A rank never overwrites a win (`W|`), so a repeated mark after a grant changes nothing.
--
-- KEYS[1] draw meta   {T}:draw:<sku>   KEYS[2] entrants {T}:entrants:<sku>
-- ARGV[1] "1" when this is the shard's last batch, "0" when more follow, "h:<token>" for
--         a restore's batch on a shard it holds under that token (draw_open.lua `held`:
--         no state; the restore gives the state once its wins and marks are back); the
--         batch counts itself in the hold
-- ARGV[2..] user, rank pairs
-- Returns (never nil): {91, marked}   {14} NOT_PREHEATED (no state, or not held: a shard
--   the draw loop finds held is the restore's to mark, and a mark of the draw loop's
--   must not publish it before the restore's wins are back)

local token = string.match(ARGV[1], '^h:(.+)$')
if token then
  if redis.call('HGET', KEYS[1], 'hold') ~= token then
    return {14}
  end
  redis.call('HINCRBY', KEYS[1], 'hn', 1)
elseif not redis.call('HGET', KEYS[1], 'state') then
  return {14}
end
local marked = 0
for i = 2, #ARGV, 2 do
  local v = redis.call('HGET', KEYS[2], ARGV[i])
  if not v or string.sub(v, 1, 1) ~= 'W' then
    redis.call('HSET', KEYS[2], ARGV[i], 'R|' .. ARGV[i + 1])
    marked = marked + 1
  end
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'state', 'drawn')
end
return {91, marked}
