-- dead_letter.lua: moves one entry of a shard's claims stream to the shard's dead-letter
-- stream: the copy, then XACK and XDEL of the original, in one atomic step.
--
-- KEYS[1] claims stream        {T}:claims
-- KEYS[2] dead-letter stream   {T}:dead
-- ARGV[1] consumer group
-- ARGV[2] entry id
-- ARGV[3] why
-- ARGV[4..] the entry's fields and values, in pairs
-- Returns 1.
--
-- The copy comes first and its failure ends the script: a valid claim in the dead letters
-- has no other record, so the original must not go unless the copy is there. (Sent as a
-- pipeline, an XADD Redis refused under maxmemory still let the XACK and XDEL after it
-- run, which are allowed out of memory; `shard-router/tests/it/stream_ack.rs`.)

local add = {'XADD', KEYS[2], '*'}
for i = 4, #ARGV do
  add[#add + 1] = ARGV[i]
end
add[#add + 1] = 'dead_entry'
add[#add + 1] = ARGV[2]
add[#add + 1] = 'dead_reason'
add[#add + 1] = ARGV[3]
redis.call(unpack(add))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
