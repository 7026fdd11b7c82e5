-- recover.lua: a daemon's recovery check of the breaker's dependency
-- succeeded; an open breaker goes half-open at once.
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there; ARGV[7] is
-- the daemon that ran the check). The rule: breaker.step.recover in
-- internal/breaker/breaker.go.
--
-- ARGV[8] -> generation the breaker was open at when the check started
-- ARGV[9] -> the policy's shadow field: 1 or 0 (its event is marked
--            shadow when the breaker is shadowed; breaker/shadow.go)
--
-- Returns {moved, snapshot}
--   moved: 1 the breaker went open -> half_open (its next probe due now,
--          level and cooldown kept; one transition event), 0 nothing
--          changed (no longer open at that generation, pinned, paused)
-- A failed check never runs this script: it changes nothing.

local GEN = tonumber(ARGV[8])
POLICY_SHADOW = ARGV[9] == '1'

local s = load()
local dirty = expire_force(s)
if expire_pause(s) then dirty = true end

if s.force == '' and s.st == 'open' and s.gen == GEN then
  s.st = 'half_open'
  s.probe_at = clock()
  s.gen = s.gen + 1
  emit(s, 'transition', 'open', 'half_open', 'recovery_check', clock())
  save(s)
  return { 1, snapshot(s) }
end
if dirty then save(s) end
return { 0, snapshot(s) }
