-- stream_ack.lua: settles entries of one shard's claims stream whose records the ledger
-- has committed: acknowledges them and removes them from the stream, in one atomic step.
--
-- KEYS[1] claims stream   {T}:claims
-- ARGV[1] consumer group
-- ARGV[2..] entry ids, each one committed to the ledger (or copied to the dead letters),
--           sorted oldest first (unsorted ids are still safe: the floor comes out lower,
--           and an id missed below is acknowledged and removed by a later call's trim)
-- Returns {acknowledged, removed by XTRIM, removed by XDEL}.
--
-- Removal is one XTRIM MINID wherever it can be. Below the floor, the smallest of the
-- group's first pending entry, its last delivered id + 1 and the newest id given + 1,
-- every entry was delivered (the group reads in id order, from 0, and no entry is ever
-- added below one it has read) and is not pending any more, so it was acknowledged; the
-- consumer acknowledges only entries whose records are in the ledger (or dead letters,
-- after their copy). The last delivered id counts because the ids given may come from
-- another master: one read there and committed, settled here after a failover to a
-- replica the reads had not reached yet (or a restart from an older snapshot). Entries
-- this master's group never delivered were read there by others that may never commit
-- them (a batch dropped because its master changed, see `consumer/src/replica.rs`); they
-- stay to be read again (`shard-router/tests/it/stream_ack.rs`; XINFO GROUPS of one group
-- costs Redis about 0.5 µs a call). So the trim removes
-- only committed entries, like a delete by id, but drops whole listpack nodes instead of
-- searching a node for every id (an XDEL of a 40-id batch cost Redis 4–6 µs per id; see
-- `campaign-ops/tests/it/redis_cost.rs`). Ids at or above the floor, committed while an older
-- entry is still pending (another writer's batch, an entry being retried), go by XDEL.
-- Only the newest id and those above the floor are parsed: Lua work stays O(1) per call
-- when batches settle in order.

if #ARGV < 2 then
  return {0, 0, 0}
end
local key, group, n = KEYS[1], ARGV[1], #ARGV

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function before(ams, aseq, bms, bseq)
  return ams < bms or (ams == bms and aseq < bseq)
end

local top_ms, top_seq = parse(ARGV[n])
if not top_seq then
  return redis.error_reply('ERR stream_ack: bad entry id ' .. ARGV[n])
end
local acked = redis.call('XACK', key, group, unpack(ARGV, 2))

local floor_ms, floor_seq = top_ms, top_seq + 1
local function lower(ms, seq)
  if ms and before(ms, seq, floor_ms, floor_seq) then
    floor_ms, floor_seq = ms, seq
  end
end
local first = redis.call('XPENDING', key, group, '-', '+', 1)
if first[1] then
  lower(parse(first[1][1]))
end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local f = {}
  for i = 1, #g, 2 do
    f[g[i]] = g[i + 1]
  end
  if f['name'] == group then
    local ms, seq = parse(f['last-delivered-id'])
    if ms then
      lower(ms, seq + 1)
    end
  end
end
local trimmed = redis.call('XTRIM', key, 'MINID', string.format('%.0f-%.0f', floor_ms, floor_seq))

-- The ids at or above the floor end the sorted list.
local rest = {}
for i = n, 2, -1 do
  local ms, seq = parse(ARGV[i])
  if not seq or before(ms, seq, floor_ms, floor_seq) then
    break
  end
  rest[#rest + 1] = ARGV[i]
end
local deleted = 0
if #rest > 0 then
  deleted = redis.call('XDEL', key, unpack(rest))
end
return {acked, trimmed, deleted}
