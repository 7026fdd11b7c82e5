-- reserve.lua: may a breaker that holds no state take a place under the
-- --max-breakers ceiling? The count and the reservation are one atomic
-- step on the live set's slot, so daemons that admit at once never
-- overshoot the ceiling. Runs alone (not after lib.lua): it touches the
-- live set only, never a breaker's keys.
--
-- KEYS[1] -> the live set (store.LiveKey): member a breaker's name, score
--            the time its state expires at the latest, ms since the epoch
-- ARGV[1] -> now, ms since the epoch (the daemon's clock, as the scores)
-- ARGV[2] -> the ceiling (--max-breakers)
-- ARGV[3] -> the breaker
-- ARGV[4] -> the reservation's end, ms since the epoch: the call that
--            creates the state re-scores it (ZADD GT) with its expiry;
--            one that never does leaves a place that lapses then
--
-- Returns {admitted, live}
--   admitted: 1 the breaker has a place (already a member, or reserved
--             now), 0 the ceiling is reached (nothing written)
--   live: the members counted, expired ones pruned first (with the new
--         reservation when there is one)

local K_LIVE = KEYS[1]
local NOW, CEILING, BREAKER, UNTIL = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]

redis.call('ZREMRANGEBYSCORE', K_LIVE, '-inf', '(' .. NOW)
local live = redis.call('ZCARD', K_LIVE)
if redis.call('ZSCORE', K_LIVE, BREAKER) then
  return {1, live}
end
if live >= CEILING then
  return {0, live}
end
redis.call('ZADD', K_LIVE, UNTIL, BREAKER)
return {1, live + 1}
