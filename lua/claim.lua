-- claim.lua: take units on the user's HOME shard, or place a hold when the slice cannot
-- cover the request so the caller can try another shard while the user's count is held.
-- One atomic step: window, replay, limit, stock, decrement, user count, XADD, PUBLISH.
--
-- KEYS[1] stock slice       {T}:stock:<sku>
-- KEYS[2] shard meta        {T}:meta:<sku>      hash: limit, start, end (ms), gen (rebuild)
-- KEYS[3] user counts       {T}:users:<sku>     hash: user -> units held (holds included)
-- KEYS[4] user sequence     {T}:useq:<sku>      hash: user -> last user_seq
-- KEYS[5] holds             {T}:holds:<sku>     hash: "user|seq" -> "qty|expires_ms:gen|request_id"
--                           (`gen`, this shard's rebuild generation, names the hold: see the
--                           hold below)
-- KEYS[6] claims stream     {T}:claims
-- KEYS[7] request result    {T}:req:<sku>:<len>:<user>:<rid>  (with a request id only)
-- ARGV[1] sku   ARGV[2] user   ARGV[3] qty (>= 1)   ARGV[4] now_ms (gateway clock)
-- ARGV[5] this shard id   ARGV[6] hold ttl ms (0 = no hold)
-- ARGV[7] request id, ARGV[8] request result ttl s: both absent without a request id
-- Every argument costs Redis work on every call, so the ones a claim without a request id
-- does not use are not sent, and the events channel is the one constant `fg:events`
-- (shard-router/src/keys.rs EVENTS_CHANNEL).
-- Returns (never nil):
--   {1, claim_id, user_seq, remaining}   CLAIMED
--   {2, claim_id, shard, qty}            REPLAY of an earlier success under this request id
--   {3, user_seq, remaining, gen}        HOLD placed; caller must settle it (`gen`: this
--                                        shard's rebuild generation, for take.lua)
--   {4}                                  IN_PROGRESS: this request id is held right now
--   {10, remaining}                      SOLD_OUT on this shard (no hold wanted)
--   {11, held}                           LIMIT_REACHED
--   {12} NOT_STARTED   {13} ENDED   {14} NOT_PREHEATED   {15} BAD_ARGUMENT
--
-- Numbers: a value read from Redis is a string, turned into a number by arithmetic (`+ 0`,
-- one conversion) rather than `tonumber` (a function call that converts twice); counts go
-- back to Redis as the caller's strings (ARGV[3]), since a Lua number is formatted with
-- printf on every call. Both showed in Redis's profile of the claim path
-- (bench/external/redis_instructions.sh).

-- qty is a u32 of at least 1 (BAD_ARGUMENT otherwise, nan and inf included). Its string
-- is written as is below, so it must also be spelled as a plain integer: the first write,
-- HINCRBY of the user's count, refuses any other spelling ("01", "1e3": an error, nothing
-- written), though a check that writes nothing may answer for its value first. now_ms or
-- a qty that is not a number at all is an error with nothing written (arithmetic on such
-- a string). shard-router sends both as integers.
local qty = ARGV[3] + 0
local now = ARGV[4] + 0
if not (qty >= 1 and qty <= 4294967295 and qty % 1 == 0) then
  return {15}
end

local meta = redis.call('HMGET', KEYS[2], 'limit', 'start', 'end', 'gen')
local stock = redis.call('GET', KEYS[1])
if not stock or not meta[1] then
  return {14}
end

-- Replay first: a retried success gets its first answer, even once the window closed.
local user = ARGV[2]
local rid = ARGV[7] or ''
if rid ~= '' then
  local seen = redis.call('GET', KEYS[7])
  if seen == 'P' then
    return {4}
  elseif seen then
    -- A write, so a replay advances the replication offset: the WAIT after it (replica
    -- durability) then confirms the replica has this answer, on whatever connection.
    redis.call('EXPIRE', KEYS[7], ARGV[8])
    -- A leading `~` marks a reroute not yet confirmed on its shard (settle.lua): the
    -- caller checks that shard before acknowledging (shard-router/src/replay.rs).
    local claim_id, shard, q = string.match(seen, '^~?([^|]+)|([^|]+)|([^|]+)$')
    return {2, claim_id, shard + 0, q + 0}
  end
end

if now < meta[2] + 0 then
  return {12}
end
if now >= meta[3] + 0 then
  return {13}
end

local held = (redis.call('HGET', KEYS[3], user) or 0) + 0
if held + qty > meta[1] + 0 then
  return {11, held}
end

stock = stock + 0
if stock < qty and ARGV[6] == '0' then
  return {10, stock}
end

redis.call('HINCRBY', KEYS[3], user, ARGV[3])
local seq = redis.call('HINCRBY', KEYS[4], user, '1')
local gen = meta[4] or '0'

if stock < qty then
  -- '%d': `..` would write seq as 1e+14 from 10^14 on, a hold settle could not find.
  -- The generation names the hold: after a loss a user's sequence starts again, so a
  -- later hold can have this `user|seq`, but never this generation (the loss is rebuilt,
  -- and fenced until then: lua/guard.lua). Settles and late applies act only on the hold
  -- they name.
  redis.call('HSET', KEYS[5], user .. '|' .. string.format('%d', seq),
    ARGV[3] .. '|' .. string.format('%d', now + ARGV[6]) .. ':' .. gen .. '|' .. rid)
  if rid ~= '' then
    redis.call('SET', KEYS[7], 'P', 'EX', ARGV[8])
  end
  return {3, seq, stock, gen + 0}
end

local remaining = redis.call('DECRBY', KEYS[1], ARGV[3])
-- The claim record, version 1 (field `c1`, shard-router/src/record/v1.rs): sku, qty, seq,
-- shard, home, ts, gen, the user's length in bytes, then the user and the request id
-- unescaped. `seq` is a Lua number: '%d' writes it whole, where `..` would write 1e+14 from
-- 10^14 on.
local id = redis.call('XADD', KEYS[6], '*', 'c1', ARGV[1] .. ',' .. ARGV[3] .. ','
  .. string.format('%d', seq) .. ',' .. ARGV[5] .. ',' .. ARGV[5] .. ',' .. ARGV[4] .. ','
  .. gen .. ',' .. #user .. ',' .. user .. rid)
local claim_id = ARGV[5] .. '-' .. id
if remaining == 0 then
  redis.call('PUBLISH', 'fg:events', 'empty ' .. ARGV[1] .. ' ' .. ARGV[5])
end
if rid ~= '' then
  redis.call('SET', KEYS[7], claim_id .. '|' .. ARGV[5] .. '|' .. ARGV[3], 'EX', ARGV[8])
end
return {1, claim_id, seq, remaining}
