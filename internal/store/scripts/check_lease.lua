-- check_lease.lua: may this daemon run the breaker's recovery check now?
-- One daemon fleet-wide holds a breaker's check lease; each grant allows
-- one check and lasts one interval, so checks reach the vendor at most
-- once an interval however many daemons there are.
-- Runs after lib.lua (KEYS[1..6] and ARGV[1..7] as documented there;
-- ARGV[7] is the daemon asking).
--
-- KEYS[7] -> brk:{<name>}:check  hash: holder (the daemon id), until (ms:
--            when the grant ends); same hash tag as the breaker's keys
-- --
-- ARGV[8] -> interval, ms: how long a grant lasts (the policy's
--            recovery_check_interval)
--
-- Returns {granted, gen, state, holder, until_ms}
--   granted: 1 this daemon runs one check now (the grant is written),
--            0 not now: the grant of holder lasts until until_ms, or the
--            breaker is not open (state says what it is; no grant then)
--   gen: the breaker's generation, to fence the check's success
--        (recover.lua ARGV[8])
-- The holder keeps the lease: for half an interval after its grant ends
-- only it may take the next one, so one daemon checks while it lives;
-- another takes over once the holder has missed that window (stopped,
-- or cut off from Redis). Grants are judged by the script's clock (lib.lua);
-- the key's TTL (two intervals) only collects an abandoned lease.

local K_CHECK = KEYS[7]
local INTERVAL = tonumber(ARGV[8])

local s = load()
local holder, until_ms = '', 0
local raw = redis.call('HGETALL', K_CHECK)
for i = 1, #raw, 2 do
  if raw[i] == 'holder' then holder = raw[i + 1] elseif raw[i] == 'until' then until_ms = tonumber(raw[i + 1]) or 0 end
end
-- Only an automatic open circuit is checked: not a pin, not a pause, not
-- a closed or half-open breaker.
if s.force ~= '' or s.st ~= 'open' then
  return { 0, s.gen, public(s), holder, until_ms }
end
local now = clock()
if now < until_ms or (holder ~= '' and holder ~= ACTOR and now < until_ms + math.floor(INTERVAL / 2)) then
  return { 0, s.gen, public(s), holder, until_ms }
end
redis.call('HSET', K_CHECK, 'holder', ACTOR, 'until', tostring(now + INTERVAL))
redis.call('PEXPIRE', K_CHECK, 2 * INTERVAL)
return { 1, s.gen, public(s), ACTOR, now + INTERVAL }
