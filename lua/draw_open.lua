-- draw_open.lua: opens a draw on one shard of its SKU (part of the preheat of a `draw`
-- campaign, and of restoring a shard Redis lost). Never moves a draw back: an existing
-- state is kept, only the window, k and stock are written again.
--
-- KEYS[1] draw meta   {T}:draw:<sku>
-- ARGV[1] entries open (ms)   ARGV[2] draw_at (ms): entries close   ARGV[3] k (stock + waitlist)
-- ARGV[4] stock   ARGV[5] key XOR ipad (64 bytes)   ARGV[6] key XOR opad (64 bytes)
-- ARGV[7] state for a new draw: open | closed | drawn (a restore passes the ledger's), or
--         `held`: the fields without a state. A restore opens a lost shard held, puts the
--         ledger's entrants (and ranks) back, then opens it again with its state: until
--         then draw_enter.lua answers NOT_PREHEATED, so a returning entrant is never
--         entered a second time, nor a winner told `lost` before the marks are back.
-- ARGV[8] '' or `publish`: the restore's last step, which gives the state only to a shard
--         that holds every write of this restore: its hold names ARGV[9] and counts
--         ARGV[10] writes (draw_restore.lua and draw_mark.lua `h:` each count one). A
--         shard lost again, or failed over to a replica holding only a prefix of the
--         restore's writes (a replica, or an AOF, holds a prefix of one connection's
--         writes), or held since by another restore, is left for the next pass.
-- ARGV[9] the restore's token (held, publish)   ARGV[10] its count of writes (publish)
-- Returns (never nil): {20, state} OPENED   {21, state} LIVE (existed; `over`: nothing
--   written)   {15} BAD_ARGUMENT
--   ({20, 'held'} when held and no state existed)   {14} NOT_PREHEATED (publish refused)

local estart, draw_at = tonumber(ARGV[1]), tonumber(ARGV[2])
local k, stock = tonumber(ARGV[3]), tonumber(ARGV[4])
if not estart or not draw_at or draw_at <= estart or not k or k < 1 or not stock
  or stock < 0 or #ARGV[5] ~= 64 or #ARGV[6] ~= 64
  or not (ARGV[7] == 'open' or ARGV[7] == 'closed' or ARGV[7] == 'drawn'
    or ARGV[7] == 'held') then
  return {15}
end
if ARGV[8] == 'publish' then
  local h = redis.call('HMGET', KEYS[1], 'hold', 'hn')
  if h[1] ~= ARGV[9] or tonumber(h[2]) ~= tonumber(ARGV[10]) then
    return {14}
  end
  redis.call('HDEL', KEYS[1], 'hold', 'hn')
end
local state = redis.call('HGET', KEYS[1], 'state')
-- Close-out's `over` meta is its state alone (campaign-ops/src/draw/over.rs): a restore
-- racing close-out writes no window back, or its pages would find `k` and put the
-- entrants and top-K back with no expiry after the campaign's keys were removed.
if state == 'over' then
  return {21, state}
end
redis.call('HSET', KEYS[1], 'estart', ARGV[1], 'draw_at', ARGV[2], 'k', ARGV[3],
  'stock', ARGV[4], 'ik', ARGV[5], 'ok', ARGV[6])
if state then
  return {21, state}
end
if ARGV[7] == 'held' then
  redis.call('HSET', KEYS[1], 'hold', ARGV[9], 'hn', 0)
  return {20, 'held'}
end
redis.call('HSET', KEYS[1], 'state', ARGV[7])
return {20, ARGV[7]}
