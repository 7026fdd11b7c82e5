-- group.lua: a group's index on a Redis Cluster, where it lives in the
-- group's own slot and so cannot change in the breakers' scripts (on a
-- single Redis, lib.lua's save() keeps it atomically instead). Runs alone
-- (not after lib.lua). The rule the counts feed: breaker/cap.go.
--
-- KEYS[1] -> brk:grp:{<group>}:known  sorted set: the group's members
--            holding state, scored by when their state expires (ms)
-- KEYS[2] -> brk:grp:{<group>}:open   sorted set: of them, the open ones
-- ARGV[1] -> count | index | status
-- ARGV[2] -> now, ms since the epoch (the scores' clock); 0: Redis TIME
--            (production; tests pin it, as lib.lua's ARGV[2])
-- ARGV[3] -> the breaker
-- ARGV[4] -> index: when the breaker's state expires, ms ('+inf' for a
--            pin without an end; '' when it holds no state: removed)
-- ARGV[5] -> index: 1 when the breaker is open (breaker.State.Denies)
-- ARGV[6] -> index: when it stops being open by itself, ms (a pin's or a
--            pause's end: breaker.State.OpenUntil), or ARGV[4]
--
-- Returns: count  {known, open} without the breaker itself (open is
--                 what record.lua's ARGV[32] takes);
--          index  {known, open} after the update, the breaker included;
--          status {known, open}.
-- Every mode first drops the entries scored now or before (their state
-- has expired: breaker.State.TTL counts a state gone at its deadline).

local K_KNOWN, K_OPEN = KEYS[1], KEYS[2]
local MODE, NOW, NAME = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if NOW == 0 then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

redis.call('ZREMRANGEBYSCORE', K_KNOWN, '-inf', NOW)
redis.call('ZREMRANGEBYSCORE', K_OPEN, '-inf', NOW)
if MODE == 'index' then
  if ARGV[4] == '' then
    redis.call('ZREM', K_KNOWN, NAME)
    redis.call('ZREM', K_OPEN, NAME)
  else
    redis.call('ZADD', K_KNOWN, ARGV[4], NAME)
    if ARGV[5] == '1' then
      redis.call('ZADD', K_OPEN, ARGV[6], NAME)
    else
      redis.call('ZREM', K_OPEN, NAME)
    end
  end
end
local known, open = redis.call('ZCARD', K_KNOWN), redis.call('ZCARD', K_OPEN)
if MODE == 'count' then
  if redis.call('ZSCORE', K_KNOWN, NAME) then known = known - 1 end
  if redis.call('ZSCORE', K_OPEN, NAME) then open = open - 1 end
end
return { known, open }
