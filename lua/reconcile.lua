-- reconcile.lua: one shard's part of a reconciliation, read in ONE atomic step, so no claim,
-- release, wave or excess removal on this shard can fall between two of its reads.
-- Read only; no key is written.
--
-- KEYS[1] stock slice          {T}:stock:<sku>
-- KEYS[2] claims stream        {T}:claims
-- KEYS[3] dead-letter stream   {T}:dead
-- KEYS[4] released claim ids   {T}:relstock:<sku>
-- KEYS[5] holds                {T}:holds:<sku>
-- KEYS[6] applied waves        {T}:waves:<sku>    hash: wave id -> units added here
-- KEYS[7] fix epoch            {T}:epoch:<sku>    bumped by every excess removal
-- ARGV[1] sku   ARGV[2] most entries / set members one snapshot may read
-- Returns (never nil):
--   {60, has_slice (0|1), slice, now_ms, last_generated_id or "", epoch,
--    {entry_id, qty, ...} of the SKU in the claims stream,
--    {original_entry_id, qty, ...} of the SKU in the dead-letter stream,
--    {released claim id, ...}, {wave id, units, ...}, units under holds}
--   {61, what, size}   TOO_BIG: a stream or set is above ARGV[2]; nothing was read

local sku = ARGV[1]
local max = tonumber(ARGV[2])
if redis.call('XLEN', KEYS[2]) > max then
  return {61, 'stream', redis.call('XLEN', KEYS[2])}
end
if redis.call('XLEN', KEYS[3]) > max then
  return {61, 'dead', redis.call('XLEN', KEYS[3])}
end
if redis.call('SCARD', KEYS[4]) > max then
  return {61, 'released', redis.call('SCARD', KEYS[4])}
end

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

-- fields is the flat {name, value, ...} list of one entry.
local function pick(fields, want_dead)
  local s, q, dead = nil, nil, nil
  for i = 1, #fields, 2 do
    local k = fields[i]
    if k == 'sku' then s = fields[i + 1]
    elseif k == 'qty' then q = fields[i + 1]
    elseif k == 'dead_entry' then dead = fields[i + 1] end
  end
  if s ~= sku or not q then
    return nil
  end
  if want_dead then
    return dead, q
  end
  return true, q
end

local live = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
  local ok, q = pick(e[2], false)
  if ok then
    live[#live + 1] = e[1]
    live[#live + 1] = q
  end
end
local dead = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[3], '-', '+')) do
  local id, q = pick(e[2], true)
  if id then
    dead[#dead + 1] = id
    dead[#dead + 1] = q
  end
end

local held = 0
for _, v in ipairs(redis.call('HVALS', KEYS[5])) do
  held = held + (tonumber(string.match(v, '^(%d+)|')) or 0)
end

return {60, slice and 1 or 0, tonumber(slice or '0'), now_ms, last,
  tonumber(redis.call('GET', KEYS[7]) or '0'),
  live, dead, redis.call('SMEMBERS', KEYS[4]), redis.call('HGETALL', KEYS[6]), held}
