-- stream_trim.lua: removes the entries of one shard's claims stream that the ledger has
-- committed, the consumer's place being KEYS[1]'s entry ARGV[1] (ledger stream_offsets).
--
-- KEYS[1] claims stream   {T}:claims
-- ARGV[1] the committed place: an entry id; every entry up to it is in the ledger
-- Returns the number of entries removed (0 when the stream is missing or the guard holds).
--
-- XTRIM MINID drops whole listpack nodes below the place, one call for many batches. The
-- guard: the stream's last generated id must be at or above the place. Below it, this
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
