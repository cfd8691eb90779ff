-- stream_trim.lua: removes the entries of one shard's claims stream that the ledger has
-- committed, the consumer's place being KEYS[1]'s entry ARGV[1] (ledger stream_offsets).
--
-- KEYS[1] claims stream   {T}:claims
-- ARGV[1] the committed place: an entry id; every entry up to it is in the ledger
-- ARGV[2] the replication id of the master the place was read under
-- Returns the number of entries removed (0 when the stream is missing or a guard holds).
--
-- First guard: this master's replication id must be the place's. Another master (a
-- failover, a restart) may not hold the history the place was read in, and its entries at
-- or below the place may not be committed yet: the consumer reads such a stream again
-- from its start and trims once it committed under this master's id. Checked here, in the
-- same atomic step as the trim, not by the caller before it.
--
-- XTRIM MINID drops whole listpack nodes below the place, one call for many batches.
-- Second guard: the stream's last generated id must be at or above the place. Below it, this
-- master does not have the history the place was read in (a restart from an older
-- snapshot, a loss, and a clock behind the old master's): its newer entries may fall at
-- or below the place, not committed yet, and the consumer reads them again from the start
-- (consumer/src/shard.rs, the new-master rule). The place's own entry goes too (MINID is
-- the id after it): a read after the place needs no entry there.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local pms, pseq = parse(ARGV[1])
if not pseq then
  return redis.error_reply('ERR stream_trim: bad entry id ' .. tostring(ARGV[1]))
end
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
if not ARGV[2] or replid ~= ARGV[2] then
  return 0
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then
    last = info[i + 1]
  end
end
local lms, lseq = parse(last or '')
if not lseq or lms < pms or (lms == pms and lseq < pseq) then
  return 0
end
return redis.call('XTRIM', KEYS[1], 'MINID', string.format('%.0f-%.0f', pms, pseq + 1))
