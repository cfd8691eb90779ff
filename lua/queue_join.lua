-- queue_join.lua: a user joins a SKU's waiting room (campaign mode `queue`).
-- Before the sale starts the user is counted in the pre-queue (a HyperLogLog: the count
-- fixes the shuffle's length at the start; the user's place in it is a keyed hash the
-- gateway signs into the queue token, shard-router/src/queue.rs). From the start on, each
-- user gets the next ticket once: a repeat, from any gateway, gets the same one, so
-- sending more requests buys no earlier place.
--
-- KEYS[1] queue state  {fgq:<sku>}:state  hash: next (tickets handed out), pre (the
--                                          pre-queue's length, fixed at the start), admitted
-- KEYS[2] pre-queue    {fgq:<sku>}:pre    HyperLogLog of the users who came before the start
-- KEYS[3] tickets      {fgq:<sku>}:tickets hash: user -> ticket (after the start)
-- ARGV[1] user   ARGV[2] now_ms (gateway clock)   ARGV[3] start_ms
-- Returns (never nil): {100} PRE_QUEUED   {101, ticket} TICKET   {15} BAD_ARGUMENT
--   {103} NOT_OPEN: the start has passed and `pre` is not fixed yet (the admission step's
--   first call, or its write-back of the ledger's marks after a loss, has not run): no
--   ticket is counted from 1 again, under positions already admitted.
-- Whether the pre-queue is over is `pre` being fixed, not the gateway's clock alone: a
-- gateway behind (within the skew bound) would otherwise add a user to the pre-queue
-- after its length was fixed, and so place them ahead of every ticket.

local now, start = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[1] == '' or not now or not start then
  return {15}
end
if redis.call('HEXISTS', KEYS[1], 'pre') == 0 then
  if now < start then
    redis.call('PFADD', KEYS[2], ARGV[1])
    return {100}
  end
  return {103}
end
local t = redis.call('HGET', KEYS[3], ARGV[1])
if t then
  return {101, tonumber(t)}
end
t = redis.call('HINCRBY', KEYS[1], 'next', 1)
redis.call('HSET', KEYS[3], ARGV[1], t)
return {101, t}
