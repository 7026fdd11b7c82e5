-- read.lua: a breaker's state, read-only. Never takes or moves a lease and
-- never writes: a pin or a pause whose time is up reads as the fresh
-- closed state the next write will make of it (breaker.Read in Go).
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there).
--
-- Returns {snapshot}

local now = now_ms()
local s = load()
local pin_lapsed = s.force ~= '' and s.force_until > 0 and now >= s.force_until
local pause_lapsed = s.force == '' and s.st == 'paused' and s.pause_until > 0 and now >= s.pause_until
if pin_lapsed or pause_lapsed then
  -- fresh() without its DEL: a read never writes.
  local gen = s.gen
  s = empty()
  s.gen = gen
  local snap = snapshot(s, now)
  snap[4] = 0 -- the workers set is dropped by the write that ends the pin
  return { snap }
end
return { snapshot(s, now) }
