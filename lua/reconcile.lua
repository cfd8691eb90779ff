-- reconcile.lua: the anchor of one shard's reconciliation snapshot, read in ONE atomic
-- step, so no claim, release, wave, late apply or excess removal on this shard falls between
-- its reads.
-- Its cost does not grow with the stream or the release set: those are read in bounded
-- pages around it (campaign-ops/src/reconcile/snapshot.rs; why that stays exact: the doc
-- comment of campaign-ops/src/reconcile/mod.rs). Read only; no key is written.
--
-- KEYS[1] stock slice          {T}:stock:<sku>
-- KEYS[2] claims stream        {T}:claims
-- KEYS[3] released claim ids   {T}:relstock:<sku>
-- KEYS[4] holds                {T}:holds:<sku>    live holds only (settled or expired away)
-- KEYS[5] applied waves        {T}:waves:<sku>    hash: wave id -> units added here
-- KEYS[6] fix epoch            {T}:epoch:<sku>    bumped by every excess removal
-- KEYS[7] debt                 {T}:debt:<sku>     units sold beyond the slice (absent = 0)
-- KEYS[8] shard meta           {T}:meta:<sku>     `gen`, `late:<claim id>` marks
-- ARGV[1] n, the number of release ids that follow
-- ARGV[2 .. n+1] claim ids whose membership in KEYS[3] is asked (at most one page)
-- ARGV[n+2 ..]   late claims taking from this shard that the ledger lists unapplied: is
--                their `late:` mark in KEYS[8] (lua/rebuild_late.lua took their units)?
-- Returns (never nil):
--   {60, has_slice (0|1), slice, now_ms, last_generated_id or "", epoch,
--    {the release ids that are in KEYS[3]}, SCARD of KEYS[3], {wave id, units, ...},
--    units under holds, debt, meta gen (absent = 0), {the late ids whose mark is set}}

local slice = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = ''
if redis.call('EXISTS', KEYS[2]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      last = info[i + 1]
    end
  end
end

local n = tonumber(ARGV[1]) or 0
local found = {}
for i = 2, n + 1 do
  if redis.call('SISMEMBER', KEYS[3], ARGV[i]) == 1 then
    found[#found + 1] = ARGV[i]
  end
end
local marked = {}
for i = n + 2, #ARGV do
  if redis.call('HEXISTS', KEYS[8], 'late:' .. ARGV[i]) == 1 then
    marked[#marked + 1] = ARGV[i]
  end
end

local held = 0
for _, v in ipairs(redis.call('HVALS', KEYS[4])) do
  held = held + (tonumber(string.match(v, '^(%d+)|')) or 0)
end

return {60, slice and 1 or 0, tonumber(slice or '0'), now_ms, last,
  tonumber(redis.call('GET', KEYS[6]) or '0'),
  found, redis.call('SCARD', KEYS[3]), redis.call('HGETALL', KEYS[5]), held,
  tonumber(redis.call('GET', KEYS[7]) or '0'),
  tonumber(redis.call('HGET', KEYS[8], 'gen') or '0'), marked}
