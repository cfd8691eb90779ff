-- draw_enter.lua: one user's entry into a draw (campaign mode `draw`), or, once the entry
-- window closed, the user's standing in it. Runs on the user's HOME shard of the SKU.
-- One atomic step: the draw's state, the window, one entry per user, the priority, the
-- record for the ledger, the shard's bounded top-K.
--
-- The priority is HMAC-SHA1(seed, "<sku>:<user>"): its first 52 bits, as an integer a
-- double holds exactly (the top-K is a sorted set). Lower wins; equal priorities order by
-- user id bytes, as a sorted set orders equal scores. The seed never leaves Redis and the
-- ledger until the draw: this shard's meta holds the key already XORed with HMAC's inner and
-- outer pads (RFC 2104), written by draw_open.lua, so an entry costs two SHA-1 calls.
-- `consumer draw verify` recomputes every priority from the revealed seed
-- (campaign-ops/src/draw/verify.rs).
--
-- KEYS[1] draw meta      {T}:draw:<sku>     hash: state (open|closed|drawn|over), estart,
--                                           draw_at, k, ik, ok, stock (`over`: state alone)
-- KEYS[2] entrants       {T}:entrants:<sku> hash: user -> E|<entry id> | R|<rank> | W|<claim id>|<shard>
-- KEYS[3] top-K          {T}:topk:<sku>     sorted set: user by priority, at most k members
-- KEYS[4] entries stream {T}:entries        one entry per accepted entry, for the ledger
-- KEYS[5] grant answer   {T}:req:<sku>:<len>:<user>:draw  (the grant claim's stored answer)
-- KEYS[6] winners        {T}:winners:<sku>  hash: user -> <claim id>|<shard>, written by
--                                           close-out from the ledger's wins
-- ARGV[1] sku   ARGV[2] user   ARGV[3] now_ms (gateway clock)
-- Returns (never nil):
--   {80, entry_id, fresh}       ENTERED (fresh 1: this call entered; 0: entered before)
--   {81, claim_id, shard, qty}  WON: the grant's claim
--   {82}                        WON, its claim not made yet
--   {83, position}              WAITLISTED at `position` (1 = next to be served)
--   {84}                        LOST
--   {85, entry_id}              CLOSED: entered, the draw has not run yet
--   {86}                        OVER: the campaign closed out and this user won nothing
--   {12} NOT_STARTED   {13} ENDED (entries closed, this user did not enter)
--   {14} NOT_PREHEATED   {15} BAD_ARGUMENT
--
-- Close-out (campaign-ops/src/draw/over.rs) removes the entrants and the top-K but leaves
-- the meta in state `over` and the winners, both for as long as the SKU's metadata may
-- send a request here: a winner is still told its claim, anyone else that it is over.

local m = redis.call('HMGET', KEYS[1], 'state', 'estart', 'draw_at', 'k', 'ik', 'ok', 'stock')
if not m[1] then
  return {14}
end
local user = ARGV[2]
local now = tonumber(ARGV[3])
if user == '' or not now then
  return {15}
end
if m[1] == 'over' then
  local won = redis.call('HGET', KEYS[6], user)
  if not won then
    return {86}
  end
  local claim_id, shard = string.match(won, '^([^|]+)|(%d+)$')
  return {81, claim_id, tonumber(shard), 1}
end
local v = redis.call('HGET', KEYS[2], user)

if m[1] == 'drawn' then
  if not v then
    return {13}
  end
  local tag = string.sub(v, 1, 1)
  if tag == 'W' then
    local claim_id, shard = string.match(v, '^W|([^|]+)|(%d+)$')
    return {81, claim_id, tonumber(shard), 1}
  elseif tag == 'R' then
    local rank = tonumber(string.sub(v, 3))
    -- The grant's stored answer, when the service has not marked the win yet.
    local seen = redis.call('GET', KEYS[5])
    if seen and seen ~= 'P' then
      local claim_id, shard = string.match(seen, '^~?([^|]+)|([^|]+)|')
      return {81, claim_id, tonumber(shard), 1}
    end
    local stock = tonumber(m[7])
    if rank <= stock then
      return {82}
    end
    return {83, rank - stock}
  end
  return {84}
end

if v then
  local id = string.sub(v, 3)
  if m[1] == 'closed' then
    return {85, id}
  end
  return {80, id, 0}
end
if m[1] ~= 'open' then
  return {13}
end
if now < tonumber(m[2]) then
  return {12}
end
if now >= tonumber(m[3]) then
  return {13}
end

local inner = redis.sha1hex(m[5] .. ARGV[1] .. ':' .. user)
inner = (string.gsub(inner, '..', function(h) return string.char(tonumber(h, 16)) end))
local outer = redis.sha1hex(m[6] .. inner)
-- %.0f: tostring would print a 52-bit integer in exponent form.
local prio = string.format('%.0f', tonumber(string.sub(outer, 1, 13), 16))

local id = redis.call('XADD', KEYS[4], '*', 'sku', ARGV[1], 'user', user, 'prio', prio,
  'ts', ARGV[3])
redis.call('HSET', KEYS[2], user, 'E|' .. id)
redis.call('ZADD', KEYS[3], prio, user)
if redis.call('ZCARD', KEYS[3]) > tonumber(m[4]) then
  redis.call('ZPOPMAX', KEYS[3])
end
return {80, id, 1}
