-- reconcile_fix.lua: takes units a reconciliation found in excess (Redis holds more than the
-- ledger allows, e.g. after it lost writes) out of one shard's slice.
-- Compare-and-set on the shard's fix epoch: it runs only if no other removal ran on this
-- shard since the snapshot that measured the excess, so two reconcilers that measured the
-- same excess remove it once. Claims, releases and waves move units between the slice (or
-- the shard's debt, which they pay first) and the other terms without changing the excess,
-- so they need not invalidate it. A rebuild changes it and bumps the epoch too, and so does
-- a late claim's apply (rebuild_late.lua; reconciliation counts an apply still to come, so
-- this is defensive).
-- What the slice cannot give was sold already (Redis came back older than the ledger and sold
-- the units again): those units are sold beyond the slice, which is the shard's debt, so they
-- go onto it in this step and the next releases and waves pay them (release_stock.lua,
-- wave.lua) instead of offering a sold unit again; the books then close.
--
-- KEYS[1] stock slice   {T}:stock:<sku>
-- KEYS[2] fix epoch     {T}:epoch:<sku>
-- KEYS[3] debt          {T}:debt:<sku>    (absent = 0)
-- ARGV[1] epoch seen by the snapshot   ARGV[2] units to remove (>= 1)
-- ARGV[3] sku   ARGV[4] this shard id   ARGV[5] events channel
-- Returns (never nil):
--   {50, removed, slice, new_epoch, owed}   REMOVED; `owed` = ARGV[2] − removed went onto
--                                           the debt (the slice had less)
--   {51, epoch}                       STALE: another removal ran since the snapshot
--   {14}                              NOT_PREHEATED: slice missing; nothing changed
--   {15}                              BAD_ARGUMENT

local seen = tonumber(ARGV[1])
local units = string.match(ARGV[2], '^[1-9]%d*$') and tonumber(ARGV[2])
if not seen or not units then
  return {15}
end
local epoch = tonumber(redis.call('GET', KEYS[2]) or '0')
if epoch ~= seen then
  return {51, epoch}
end
local slice = redis.call('GET', KEYS[1])
if not slice then
  return {14}
end
slice = tonumber(slice)
local removed = math.min(units, math.max(slice, 0))
local left = slice
if removed > 0 then
  left = redis.call('DECRBY', KEYS[1], removed)
  if left == 0 then
    redis.call('PUBLISH', ARGV[5], 'empty ' .. ARGV[3] .. ' ' .. ARGV[4])
  end
end
local owed = units - removed
if owed > 0 then
  redis.call('INCRBY', KEYS[3], owed)
end
local new_epoch = redis.call('INCR', KEYS[2])
return {50, removed, left, new_epoch, owed}
