-- rebuild_late.lua: counts a "late" claim on one shard. A late claim was acknowledged
-- before a rebuild from the ledger but reached the ledger only after that rebuild read it
-- (a consumer held it in memory while Redis lost its data), so the rebuilt shard does not
-- count it (see consumer/src/late.rs). Run once on the shard whose slice gave the
-- units (take part) and once on the user's home shard (home part); one call when they are
-- the same shard.
--
-- Only a shard written back by the rebuild the claim was judged against counts it: a newer
-- rebuild already counted it from the ledger (STALE), and a shard not rebuilt yet at that
-- generation (fenced, missing, older) is retried later (WAIT). Idempotent per claim id
-- through a `late:<claim id>` field in the shard meta (rebuild.lua clears those fields); its
-- value is "1|<short>", so a retry after a crash before the caller recorded the oversell
-- still learns the shortfall (a mark written as plain "1" reads as short 0).
--
-- Units the slice lacks were sold again after the rebuild (an oversell, reported by the
-- caller): they go to the shard's debt, in this same step, so whatever later grows the
-- slice (release_stock.lua for any claim of the shard, wave.lua) pays them first instead
-- of offering a unit that does not exist. The `late:` mark is set in the step that takes the
-- units: reconciliation's anchor (lua/reconcile.lua) reads it to tell an apply still to come
-- (units still in the slice) from one done. The fix epoch is bumped too (defensive: an
-- excess measured before this apply is refused and measured again, lua/reconcile_fix.lua).
--
-- KEYS[1] stock slice   {T}:stock:<sku>
-- KEYS[2] shard meta    {T}:meta:<sku>     `gen`, `rebuild` (fence)
-- KEYS[3] user counts   {T}:users:<sku>
-- KEYS[4] user sequence {T}:useq:<sku>
-- KEYS[5] holds         {T}:holds:<sku>
-- KEYS[6] request result {T}:req:<sku>:<len>:<user>:<rid> (unused when ARGV[7] == "")
-- KEYS[7] debt          {T}:debt:<sku>     (absent = 0)
-- KEYS[8] fix epoch     {T}:epoch:<sku>
-- ARGV[1] claim id   ARGV[2] generation judged against   ARGV[3] qty (>= 1)
-- ARGV[4] "1": take the units off this slice (the claim's shard), else "0"
-- ARGV[5] user when this is the home shard, else ""   ARGV[6] user_seq
-- ARGV[7] replay answer "claim_id|shard|qty" or ""   ARGV[8] answer ttl s
-- ARGV[9] events channel   ARGV[10] sku   ARGV[11] this shard id
-- ARGV[12] the claim's request id or ""
-- ARGV[13] the claim's record generation (`gen`): the generation its hold, if it came from
-- one, was placed under
-- Returns (never nil):
--   {70, short}   APPLIED; `short` units were missing from the slice (an oversell)
--   {71, short}   ALREADY applied on this shard; `short` as that apply found it
--   {72}          STALE: a newer rebuild counted the claim from the ledger
--   {73}          WAIT: this shard is not (yet) the one rebuilt at that generation
--   {15}          BAD_ARGUMENT

local gen = tonumber(ARGV[2])
local qty = tonumber(ARGV[3])
local seq = tonumber(ARGV[6])
if not gen or not qty or qty < 1 or not seq then
  return {15}
end
local meta = redis.call('HMGET', KEYS[2], 'gen', 'rebuild')
local have = tonumber(meta[1] or '0')
if have > gen then
  return {72}
end
local stock = redis.call('GET', KEYS[1])
if have < gen or meta[2] or not stock then
  return {73}
end
local mark = 'late:' .. ARGV[1]
local seen = redis.call('HGET', KEYS[2], mark)
if seen then
  return {71, tonumber(string.match(seen, '^1|(%d+)$') or '0')}
end

local short = 0
if ARGV[4] == '1' then
  stock = tonumber(stock)
  local left = stock - qty
  if left < 0 then
    short = -left
    left = 0
  end
  redis.call('SET', KEYS[1], left)
  if short > 0 then
    redis.call('INCRBY', KEYS[7], short)
  end
  redis.call('INCR', KEYS[8])
  if left == 0 then
    redis.call('PUBLISH', ARGV[9], 'empty ' .. ARGV[10] .. ' ' .. ARGV[11])
  end
end

redis.call('HSET', KEYS[2], mark, '1|' .. short)

local user = ARGV[5]
-- A hold still standing for this (user, seq) already counts the units for the user, when
-- it is this claim's own (the second chance it came from). The seq was handed out again
-- after Redis lost it (that loss is what made this claim late), so a hold of the same
-- `user|seq`, even of the same request id (the client's retry), is another claim's unless
-- it was placed under the generation this claim was taken under: a hold is named by its
-- generation (claim.lua).
local ours = false
if user ~= '' then
  local hold = redis.call('HGET', KEYS[5], user .. '|' .. ARGV[6])
  if hold then
    local placed, rid = string.match(hold, '^[^|]*|%-?%d+:(%d+)|(.*)$')
    ours = placed ~= nil and tonumber(placed) == tonumber(ARGV[13])
      and (rid == '' or ARGV[12] == '' or rid == ARGV[12])
  end
end
-- Its own hold is settled here as kept (settle.lua "keep"): the claim is in the ledger, so
-- the hold has nothing left to decide, and an undo decided before the commit (stale-hold
-- resolution found the claim nowhere yet) must find it gone instead of taking the user's
-- count down. The answer becomes final, over "P" or a tentative one (as the consumer does
-- for a committed reroute, consumer/src/final_answers.rs).
if ours then
  redis.call('HDEL', KEYS[5], user .. '|' .. ARGV[6])
  if ARGV[7] ~= '' then
    local cur = redis.call('GET', KEYS[6])
    if not cur or cur == 'P' or cur == '~' .. ARGV[7] then
      redis.call('SET', KEYS[6], ARGV[7], 'EX', ARGV[8])
    end
  end
end
if user ~= '' and not ours then
  redis.call('HINCRBY', KEYS[3], user, qty)
  if tonumber(redis.call('HGET', KEYS[4], user) or '0') < seq then
    redis.call('HSET', KEYS[4], user, seq)
  end
  if ARGV[7] ~= '' then
    -- NX: a newer answer (or an in-progress marker) under this request id stays.
    redis.call('SET', KEYS[6], ARGV[7], 'EX', ARGV[8], 'NX')
    -- A user gateways may have read as "no answer" (their sold-out filter,
    -- shard-router/src/replay_users.rs) has one now: they drop what they read.
    redis.call('PUBLISH', ARGV[9], 'replay ' .. ARGV[10])
  end
end
return {70, short}
