-- vouch.lua: records that the ledger vouches for this Redis process's state of one shard
-- (lua/guard.lua says why). Checked against the process's own run_id in the same atomic
-- step, so a vouch decided for one process never lands on another (a restart between
-- the caller's INFO and this call).
--
-- KEYS[1] the shard's vouch   {T}:vouch
-- KEYS[2] the shard's claims stream   {T}:claims
-- ARGV[1] "set": vouch for the process whose run_id is ARGV[2] (the consumer, after it
--         rebuilt the shard's live SKUs from the ledger)
--         "init": vouch for this process only if the shard has no vouch and no claim
--         stream yet (a first preheat: nothing older can come back than what is written
--         from now on; a shard with claims but no vouch is left to the consumer)
--         "revoke": the vouch names another process: replace it by `revoked`, so that
--         process (an old master that resyncs from here and is promoted back, keeping
--         its run_id) does not find its own vouch in the copy
--         "distrust": replace whatever vouch there is by `revoked`, this process's too: the
--         ledger found what only a process older than the ledger hands out (a claim id it
--         holds for another claim, a user's sequence used twice), so the shard sells
--         nothing until the consumer rebuilt it from the ledger and vouched again
-- ARGV[2] the run_id the caller checked ("set" only)
-- Returns (never nil):
--   {18}          VOUCHED (or REVOKED for "revoke" and "distrust")
--   {19, run_id}  NOT_THIS_PROCESS: this process is another (set), a vouch or a stream
--                 exists (init), the vouch names this process (revoke)

local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if ARGV[1] == 'set' then
  if run_id ~= ARGV[2] then
    return {19, run_id}
  end
elseif ARGV[1] == 'revoke' then
  local v = redis.call('GET', KEYS[1])
  if not v or v == run_id or v == 'revoked' then
    return {19, run_id}
  end
  redis.call('SET', KEYS[1], 'revoked')
  return {18}
elseif ARGV[1] == 'distrust' then
  redis.call('SET', KEYS[1], 'revoked')
  return {18}
elseif redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return {19, run_id}
end
redis.call('SET', KEYS[1], run_id)
return {18}
