-- queue_admit.lua: the waiting room's admission step (campaign-ops/src/queue.rs). Fixes
-- the pre-queue's length once (its HyperLogLog's count at the first call after the
-- start), and raises the admitted watermark, never lowers it.
--
-- KEYS[1] queue state {fgq:<sku>}:state   KEYS[2] pre-queue {fgq:<sku>}:pre
-- ARGV[1] admitted: every ticket at or below it may claim (a floor; ignored when lower)
-- ARGV[2] the admission rate (positions per second), for the gateways' wait estimates
-- ARGV[3] the pre-queue's length the ledger kept, or "" (a loss must not re-count it from
--         an empty HyperLogLog: every pre-queue token's position rests on it)
-- ARGV[4] the ledger's high-water of tickets handed out (after a loss, new tickets start
--         above it instead of at positions already admitted)
-- Returns (never nil): {102, pre, admitted, next, rate}

if redis.call('HEXISTS', KEYS[1], 'pre') == 0 then
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[1], 'pre', ARGV[3])
  else
    redis.call('HSET', KEYS[1], 'pre', redis.call('PFCOUNT', KEYS[2]))
  end
end
local floor = tonumber(ARGV[4]) or 0
if tonumber(redis.call('HGET', KEYS[1], 'next') or '0') < floor then
  redis.call('HSET', KEYS[1], 'next', ARGV[4])
end
local admitted = tonumber(redis.call('HGET', KEYS[1], 'admitted') or '0')
local want = tonumber(ARGV[1])
if want and want > admitted then
  admitted = want
  redis.call('HSET', KEYS[1], 'admitted', ARGV[1])
end
redis.call('HSET', KEYS[1], 'rate', ARGV[2])
local s = redis.call('HMGET', KEYS[1], 'pre', 'next')
return {102, tonumber(s[1]), admitted, tonumber(s[2] or '0'), tonumber(ARGV[2]) or 0}
