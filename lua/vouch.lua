-- vouch.lua: records that the ledger vouches for this Redis process's state of one shard
-- (lua/guard.lua says why). Checked against the process's own run_id in the same atomic
-- step, so a vouch decided for one process never lands on another (a restart between
-- the caller's INFO and this call).
--
-- KEYS[1] the shard's vouch   {T}:vouch
-- ARGV[1] "set": vouch for the process whose run_id is ARGV[2] (the consumer, after it
--         rebuilt the shard's live SKUs from the ledger)
--         "init": vouch for this process only if the shard has no vouch at all (a first
--         preheat: nothing older can come back than what is written from now on)
-- ARGV[2] the run_id the caller checked ("set" only)
-- Returns (never nil):
--   {18}          VOUCHED
--   {19, run_id}  NOT_THIS_PROCESS: this process is another (set), or a vouch exists (init)

local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if ARGV[1] == 'set' then
  if run_id ~= ARGV[2] then
    return {19, run_id}
  end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return {19, run_id}
end
redis.call('SET', KEYS[1], run_id)
return {18}
