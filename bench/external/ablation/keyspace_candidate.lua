-- keyspace_candidate.lua: a claim script that was measured, not shipped. It asks whether
-- the keyspace change issue 36 names would bring claim.lua near the peer's cost: the slice
-- in the meta hash (one HMGET reads stock, limit, window and generation; HINCRBY takes the
-- units) and the user's count and sequence in one field (count * 2^32 + seq: one HGET, one
-- HINCRBY). The claimed path only (no hold, no PUBLISH of an empty shard is ever reached in
-- the measurement); everything else as lua/claim.lua. Measured by
-- `CANDIDATE=bench/external/ablation/keyspace_candidate.lua bench/external/redis_instructions.sh`
-- (results: docs/BENCHMARKS.md "Would the keyspace change reach 1.5×?").
--
-- KEYS[1] meta hash: stock, limit, start, end, gen   KEYS[2] users: user -> count*2^32+seq
-- KEYS[3] holds (unused here)   KEYS[4] claims stream   KEYS[5] request result (request id only)
-- ARGV sku, user, qty, now_ms, shard, hold_ttl, -qty, qty*2^32+1 [, request id, ttl s]
local qty = ARGV[3] + 0
local now = ARGV[4] + 0
if not (qty >= 1 and qty <= 4294967295 and qty % 1 == 0) then
  return {15}
end
local meta = redis.call('HMGET', KEYS[1], 'stock', 'limit', 'start', 'end', 'gen')
if not meta[1] then
  return {14}
end
local user = ARGV[2]
local rid = ARGV[9] or ''
if rid ~= '' then
  local seen = redis.call('GET', KEYS[5])
  if seen == 'P' then
    return {4}
  elseif seen then
    redis.call('EXPIRE', KEYS[5], ARGV[10])
    local claim_id, shard, q = string.match(seen, '^~?([^|]+)|([^|]+)|([^|]+)$')
    return {2, claim_id, shard + 0, q + 0}
  end
end
if now < meta[3] + 0 then
  return {12}
end
if now >= meta[4] + 0 then
  return {13}
end
local packed = (redis.call('HGET', KEYS[2], user) or 0) + 0
local held = (packed - packed % 4294967296) / 4294967296
if held + qty > meta[2] + 0 then
  return {11, held}
end
local stock = meta[1] + 0
if stock < qty and ARGV[6] == '0' then
  return {10, stock}
end
local seq = redis.call('HINCRBY', KEYS[2], user, ARGV[8]) % 4294967296
local gen = meta[5] or '0'
local remaining = redis.call('HINCRBY', KEYS[1], 'stock', ARGV[7])
local id = redis.call('XADD', KEYS[4], '*', 'c1', ARGV[1] .. ',' .. ARGV[3] .. ','
  .. string.format('%d', seq) .. ',' .. ARGV[5] .. ',' .. ARGV[5] .. ',' .. ARGV[4] .. ','
  .. gen .. ',' .. #user .. ',' .. user .. rid)
local claim_id = ARGV[5] .. '-' .. id
if remaining == 0 then
  redis.call('PUBLISH', 'fg:events', 'empty ' .. ARGV[1] .. ' ' .. ARGV[5])
end
if rid ~= '' then
  redis.call('SET', KEYS[5], claim_id .. '|' .. ARGV[5] .. '|' .. ARGV[3], 'EX', ARGV[10])
end
return {1, claim_id, seq, remaining}
