-- read.lua: a breaker's state, read-only. Never takes or moves a lease and
-- never writes: a pin whose TTL has lapsed reads as the fresh closed state
-- the next write will make of it (breaker.Read in Go).
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there).
--
-- Returns {snapshot}

local now = now_ms()
local s = load()
if s.force ~= '' and s.force_until > 0 and now >= s.force_until then
  -- fresh() without its DEL: a read never writes.
  s.st, s.fails, s.rl, s.last, s.level, s.cause = 'closed', 0, 0, '', 0, ''
  s.opened, s.probe_at, s.cd, s.lease, s.lease_until = 0, 0, 0, '', 0
  s.suspect, s.suspect_until = '', 0
  s.force, s.force_reason, s.force_by, s.force_until = '', '', '', 0
  local snap = snapshot(s, now)
  snap[4] = 0 -- the workers set is dropped by the write that ends the pin
  return { snap }
end
return { snapshot(s, now) }
