-- guard.lua: the first lines of claim.lua, take.lua and settle.lua as the gateway loads
-- them (shard-router/src/guard.rs). It refuses to sell on a Redis process the ledger has
-- not vouched for since it started: a restart from an older snapshot, an AOF that lost its
-- last second, or a promoted replica that lacks the last writes all bring back slices,
-- counts and answers older than the ledger, and the generation and the stream roll back
-- with them, so nothing in the data can tell. The process's own identity cannot roll
-- back: `run_id` is new at every start and differs on every node. The loader puts this
-- process's run_id in SERVER (it reads INFO and loads the body on one connection, so the
-- body exists only on the process it names: scripts are neither persisted nor replicated
-- since Redis 7.0), and the consumer writes `{T}:vouch` = run_id once it has rebuilt the
-- shard's live SKUs from the ledger (campaign-ops/src/rebuild/watch.rs, lua/vouch.lua).
-- A vouch of another process (a copy that came back with the data) refuses: {17}
-- RESTORING, nothing of the sale read or written. The refusal does revoke that copy: an old
-- master that resyncs from this process and is promoted back keeps its run_id, and must
-- not find its own vouch in the data it got here. No vouch at all (a Redis that never had
-- a consumer, or lost everything: its slices are missing too) passes.
--
-- Expects `local SERVER = '<run_id>'` before it and KEYS[1] to carry the shard's tag.
local vouch_key = string.match(KEYS[1], '^{[^}]*}') .. ':vouch'
local vouched = redis.call('GET', vouch_key)
if vouched and vouched ~= SERVER then
  if vouched ~= 'revoked' then
    redis.call('SET', vouch_key, 'revoked')
  end
  return {17}
end
