-- release_user.lua: gives a released claim's units back to the user's count on the HOME
-- shard, exactly once per claim id, so the user may claim again.
--
-- KEYS[1] user counts          {T}:users:<sku>
-- KEYS[2] released claim ids   {T}:reluser:<sku>
-- KEYS[3] shard meta           {T}:meta:<sku>  (a `rebuild` field: the shard is fenced)
-- ARGV[1] claim id   ARGV[2] user   ARGV[3] qty
-- Returns (never nil):
--   {40, held}   RELEASED: the user's count after the release
--   {41}         ALREADY_RELEASED: nothing changed
--   {14}         NOT_PREHEATED: a rebuild from the ledger holds this shard (it rewrites the
--                counts from what it read); nothing changed, the release is retried later
--   {15}         BAD_ARGUMENT

local qty = tonumber(ARGV[3])
if not qty or qty < 1 then
  return {15}
end
if redis.call('HEXISTS', KEYS[3], 'rebuild') == 1 then
  return {14}
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return {41}
end
local held = redis.call('HINCRBY', KEYS[1], ARGV[2], -qty)
if held <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
  held = 0
end
return {40, held}
