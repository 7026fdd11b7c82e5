-- target_lease.lua: may this daemon check a recovery-check target (a URL,
-- a gRPC target) now? However many open breakers share the target, one
-- check reaches it per interval fleet-wide. Runs alone (not after
-- lib.lua): it touches the target's key only, never a breaker's.
--
-- KEYS[1] -> brk:check-target:<hex SHA-256 of the target> (store.TargetKey):
--            a string, when the current grant ends (ms since the epoch)
-- --
-- ARGV[1] -> now, ms since the epoch when pinned (tests), else 0: Redis's
--            TIME, as lib.lua's clock
-- ARGV[2] -> interval, ms: how long a grant lasts
--
-- Returns {granted}
--   granted: 1 this daemon checks the target now (the grant is written),
--            0 a grant is live
-- The key's TTL (two intervals) only collects it.

local K_TARGET = KEYS[1]
local now, INTERVAL = tonumber(ARGV[1]), tonumber(ARGV[2])
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if now < (tonumber(redis.call('GET', K_TARGET) or 0) or 0) then
  return {0}
end
redis.call('SET', K_TARGET, tostring(now + INTERVAL), 'PX', 2 * INTERVAL)
return {1}
