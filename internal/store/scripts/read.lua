-- read.lua: a breaker's state, read-only. Never takes or moves a lease and
-- never writes: a pin or a pause whose time is up reads as the fresh
-- closed state the next write will make of it (breaker.Read in Go).
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there).
--
-- ARGV[8] -> window, ms: 0 for consecutive mode; else window mode, and
--            the reply adds the window's calls, failures and slow calls
--
-- Returns {snapshot}, or {snapshot, window calls, window failures, window
-- slow calls} in window mode.

local WINDOW_MS = tonumber(ARGV[8]) or 0

local s = load()

-- reply adds the window's totals in window mode (of the stored
-- generation: a read never writes, so a lapsed pin's window still reads).
local function reply(snap)
  if WINDOW_MS <= 0 then return { snap } end
  local calls, fails, _, slow = win_totals(win_load(s.gen, win_bucket(WINDOW_MS)))
  return { snap, calls, fails, slow }
end
local pin_lapsed = s.force ~= '' and s.force_until > 0 and clock() >= s.force_until
local pause_lapsed = s.force == '' and s.st == 'paused' and s.pause_until > 0 and clock() >= s.pause_until
if pin_lapsed or pause_lapsed then
  -- fresh() without its DEL: a read never writes.
  local gen = s.gen
  local fresh_s = empty()
  fresh_s.gen = gen
  fresh_s.shadow = s.shadow
  local snap = snapshot(fresh_s)
  snap[4] = 0 -- the workers set is dropped by the write that ends the pin
  return reply(snap)
end
return reply(snapshot(s))
