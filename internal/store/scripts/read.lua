-- read.lua: a breaker's state, read-only. Never takes or moves a lease and
-- never writes: a pin whose TTL has lapsed reads as the fresh closed state
-- the next write will make of it.
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there).
--
-- Returns {snapshot}

local now = now_ms()
local s = load()
if s.force ~= '' and s.force_until > 0 and now >= s.force_until then
  fresh(s, true)
  local snap = snapshot(s, now)
  snap[4] = 0 -- the workers set is dropped by the write that ends the pin
  return { snap }
end
return { snapshot(s, now) }
