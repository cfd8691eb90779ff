-- rebuild.lua: writes one shard of a SKU back from the ledger and lifts the fence that
-- rebuild_fence.lua put up, in one atomic step. Runs only under the caller's own fence: a
-- rebuild whose fence was taken over (its lease ran out) changes nothing.
--
-- KEYS[1] stock slice      {T}:stock:<sku>
-- KEYS[2] shard meta       {T}:meta:<sku>
-- KEYS[3] user counts      {T}:users:<sku>     replaced as a whole
-- KEYS[4] user sequence    {T}:useq:<sku>      raised, never lowered
-- KEYS[5] holds            {T}:holds:<sku>     kept; unmatched holds count for their user
-- KEYS[6] released (stock) {T}:relstock:<sku>  added to
-- KEYS[7] released (user)  {T}:reluser:<sku>   added to
-- KEYS[8] applied waves    {T}:waves:<sku>     replaced: only waves the ledger applied
-- KEYS[9] fix epoch        {T}:epoch:<sku>     bumped: an excess measured before the
--                                               rebuild is stale (lua/reconcile_fix.lua)
-- KEYS[10] debt            {T}:debt:<sku>      set: units the ledger counts sold beyond
--                                               this shard's share (see rebuild_late.lua)
-- KEYS[11] claims stream   {T}:claims          its last id raised to ARGV[11], never lowered
-- ARGV[1] token   ARGV[2] slice (>= 0)   ARGV[3] limit   ARGV[4] start_ms   ARGV[5] end_ms
-- ARGV[6] sku   ARGV[7] this shard id   ARGV[8] events channel
-- ARGV[9] rebuild generation (campaigns.rebuild_gen): claim.lua and take.lua copy it into
--         each record, and lua/rebuild_late.lua counts a late claim only at its generation
-- ARGV[10] debt (>= 0): active ledger units of this shard beyond its share; the ledger
--         holds every late claim a debt came from, so the debt is set, never added to
-- ARGV[11] stream floor "<ms>-<seq>" or "": the highest entry id of a claim the ledger
--         holds from this shard. A stream Redis lost (or a failover rolled back, or a
--         master whose clock runs behind) would hand out ids again from below it, and a
--         new claim with an id the ledger holds is taken for a duplicate and dropped
-- then four counted lists, each "<n>" followed by its items:
--   users:    n × (user, units held in active claims homed here, highest user_seq)
--   matched:  n × "user|seq" of holds whose claim the rebuild found (already counted)
--   relstock: n × claim id released to this slice
--   reluser:  n × claim id released to this home shard's user counts
--   waves:    n × wave id the ledger has applied (inside the stock; see campaign-ops/src/wave.rs)
-- Returns (never nil):
--   {60, slice}   REBUILT
--   {61}          FENCE_LOST: this token no longer holds the shard; nothing changed
--   {15}          BAD_ARGUMENT

local slice = tonumber(ARGV[2])
if not slice or slice < 0 or not tonumber(ARGV[3]) or not tonumber(ARGV[4])
  or not tonumber(ARGV[5]) or not tonumber(ARGV[9]) then
  return {15}
end
local debt = tonumber(ARGV[10])
if not debt or debt < 0 or (debt > 0 and slice > 0) then
  return {15}
end
local held = redis.call('HGET', KEYS[2], 'rebuild')
if not held or string.match(held, '^([^|]+)|') ~= ARGV[1] then
  return {61}
end

-- Entry ids compare as (ms, seq) pairs of integers.
local function id_below(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local floor = ARGV[11]
if floor ~= '' then
  if not string.match(floor, '^%d+-%d+$') then
    return {15}
  end
  if redis.call('EXISTS', KEYS[11]) == 1 then
    local info = redis.call('XINFO', 'STREAM', KEYS[11])
    for f = 1, #info, 2 do
      if info[f] == 'last-generated-id' and id_below(info[f + 1], floor) then
        redis.call('XSETID', KEYS[11], floor)
      end
    end
  else
    -- XSETID needs a stream: one entry at the floor, deleted at once, leaves an empty
    -- stream whose last id is the floor.
    redis.call('XADD', KEYS[11], floor, 'floor', '1')
    redis.call('XDEL', KEYS[11], floor)
  end
end

local i = 12
local function count()
  local n = tonumber(ARGV[i])
  i = i + 1
  return n or 0
end

redis.call('DEL', KEYS[3])
local n = count()
for _ = 1, n do
  local user, units, seq = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  i = i + 3
  if units > 0 then
    redis.call('HSET', KEYS[3], user, units)
  end
  local cur = tonumber(redis.call('HGET', KEYS[4], user) or '0')
  if seq > cur then
    redis.call('HSET', KEYS[4], user, seq)
  end
end

-- A hold still standing is a claim in progress (placed before the fence): its units count
-- for the user until it is settled, unless its claim is already among the counted ones.
local matched = {}
n = count()
for _ = 1, n do
  matched[ARGV[i]] = true
  i = i + 1
end
local holds = redis.call('HGETALL', KEYS[5])
for h = 1, #holds, 2 do
  local field, value = holds[h], holds[h + 1]
  local user, seq = string.match(field, '^(.*)|(%d+)$')
  local qty = tonumber(string.match(value, '^(%d+)|'))
  if user and qty and not matched[field] then
    redis.call('HINCRBY', KEYS[3], user, qty)
  end
  if user and tonumber(redis.call('HGET', KEYS[4], user) or '0') < tonumber(seq) then
    redis.call('HSET', KEYS[4], user, seq)
  end
end

for k = 6, 7 do
  n = count()
  for _ = 1, n do
    redis.call('SADD', KEYS[k], ARGV[i])
    i = i + 1
  end
end

-- A wave id left here but not applied in the ledger would make its retry add nothing
-- after the slice was written without it.
redis.call('DEL', KEYS[8])
n = count()
for _ = 1, n do
  redis.call('HSET', KEYS[8], ARGV[i], 0)
  i = i + 1
end

redis.call('INCR', KEYS[9])

-- Late-claim marks of an older generation are meaningless now (rebuild_late.lua refuses
-- every other generation), so they do not pile up in the meta.
local fields = redis.call('HKEYS', KEYS[2])
for _, f in ipairs(fields) do
  if string.sub(f, 1, 5) == 'late:' then
    redis.call('HDEL', KEYS[2], f)
  end
end
redis.call('HSET', KEYS[2], 'limit', ARGV[3], 'start', ARGV[4], 'end', ARGV[5],
  'gen', ARGV[9])
redis.call('HDEL', KEYS[2], 'rebuild')
if debt > 0 then
  redis.call('SET', KEYS[10], debt)
else
  redis.call('DEL', KEYS[10])
end
redis.call('SET', KEYS[1], slice)
if slice > 0 then
  redis.call('PUBLISH', ARGV[8], 'restock ' .. ARGV[6] .. ' ' .. ARGV[7])
else
  redis.call('PUBLISH', ARGV[8], 'empty ' .. ARGV[6] .. ' ' .. ARGV[7])
end
return {60, slice}
