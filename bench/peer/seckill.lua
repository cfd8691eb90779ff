-- seckill.lua: a peer's claim script, for comparison only (nothing in flashgate runs it).
-- The shape the most-copied open-source flash-sale example uses for its voucher seckill
-- (the "hmdp" course project), written here from that description: one stock counter, one
-- set of buyers, one stream of orders. No request id (a retry is a second order attempt,
-- answered "already bought"), no sale window, a limit of one per user, one Redis. The
-- order id comes from the caller. bench/external/redis_instructions.sh runs it beside
-- lua/claim.lua on the same Redis with the same driver (docs/BENCHMARKS.md).
--
-- KEYS[1] stock (string)   KEYS[2] buyers (set of users)   KEYS[3] orders (stream)
-- ARGV[1] voucher id   ARGV[2] user   ARGV[3] order id
-- Returns 0 ORDERED, 1 SOLD_OUT, 2 ALREADY_BOUGHT

local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock or stock <= 0 then
  return 1
end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then
  return 2
end
redis.call('INCRBY', KEYS[1], -1)
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[3], '*', 'userId', ARGV[2], 'voucherId', ARGV[1], 'id', ARGV[3])
return 0
