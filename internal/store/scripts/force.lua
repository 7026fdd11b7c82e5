-- force.lua: an operator pins the breaker open or closed, or returns it to
-- automatic operation.
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there; ARGV[7] is
-- the operator).
--
-- ARGV[8]  -> mode: open | closed | auto
-- ARGV[9]  -> reason (required for open and closed; checked by the caller)
-- ARGV[10] -> TTL, ms: the pin ends by itself after this long (0: never)
--
-- Returns {snapshot}
-- AUTO leaves a fresh closed breaker. Every Force bumps the generation, so
-- outcomes of calls admitted before it are not counted after it.

local now = now_ms()
local s = load()
expire_force(s, now)
local mode, reason, ttl = ARGV[8], ARGV[9], tonumber(ARGV[10])
local from = public(s)

if mode == 'auto' then
  clear_run(s, true)
  reason = 'returned to automatic operation' .. (reason ~= '' and (': ' .. reason) or '')
else
  -- A pin ends a pause: when it lapses (or on AUTO) the breaker is fresh.
  if s.st == 'paused' then s.st, s.reason = 'closed', '' end
  s.force, s.force_reason, s.force_by = mode, reason, ACTOR
  s.force_until = 0
  if ttl > 0 then s.force_until = now + ttl end
  s.lease, s.lease_until = '', 0
end
s.gen = s.gen + 1
emit(s, 'forced', from, public(s), reason, now)
save(s, now)
return { snapshot(s, now) }
