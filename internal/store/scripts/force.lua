-- force.lua: an operator pins the breaker open or closed, or returns it to
-- automatic operation.
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there; ARGV[7] is
-- the operator). The rule: breaker.step.force in internal/breaker.
--
-- ARGV[8]  -> mode: open | closed | auto | shadow (the operator's shadow
--             setting, ARGV[12]: the machine is kept, a lease dropped)
-- ARGV[9]  -> reason (required for open and closed; checked by the caller)
-- ARGV[10] -> TTL, ms: the pin ends by itself after this long (0: never)
-- ARGV[11] -> the policy's shadow field: 1 or 0 (breaker/shadow.go)
-- ARGV[12] -> with mode shadow: the operator's setting to store, on | off,
--             or '' to follow the policy
--
-- Returns {snapshot}
-- AUTO leaves a fresh closed breaker. Every Force bumps the generation, so
-- outcomes of calls admitted before it are not counted after it.

local MODE = ARGV[8]
local REASON = ARGV[9]
local TTL = tonumber(ARGV[10])
POLICY_SHADOW = ARGV[11] == '1'
local SHADOW = ARGV[12] or ''

local s = load()
expire_force(s)
expire_pause(s)
local from = public(s)
local cause = 'forced'

if MODE == 'shadow' then
  s.shadow = SHADOW
  s.lease, s.lease_until, s.lease_by = '', 0, ''
  cause = 'shadow'
elseif MODE == 'auto' then
  fresh(s, true)
  cause = 'auto'
else
  -- A pin ends a pause: when it lapses (or on AUTO) the breaker is fresh.
  if s.st == 'paused' then s.st, s.cause, s.pause_until, s.pause_warn = 'closed', '', 0, 0 end
  s.force, s.force_reason, s.force_by = MODE, REASON, ACTOR
  s.force_until = 0
  if TTL > 0 then s.force_until = clock() + TTL end
  s.lease, s.lease_until, s.lease_by = '', 0, ''
end
s.gen = s.gen + 1
emit(s, 'forced', from, public(s), cause, clock(), REASON)
save(s)
return { snapshot(s) }
