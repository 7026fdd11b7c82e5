-- lost.lua: Redis no longer holds a state a daemon heard the breaker in (a
-- restart without persistence, an eviction, a flush): raise the state_lost
-- alert, once for the fleet. It never writes the breaker's state: what the
-- daemons do about the loss is in Go (store/forgotten.go).
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there; ARGV[7] is
-- the daemon that noticed).
--
-- ARGV[8]  -> the generation the daemon heard last
-- ARGV[9]  -> the state it heard then: open | forced_open | forced_closed
-- ARGV[10] -> that open period's cooldown, ms (0 for a pin)
-- ARGV[11] -> what follows, in plain words (the event's reason)
--
-- Returns {raised}
--   raised: 1 this call raised the alert, 0 it did not: Redis holds that
--           generation (or a later one) again, or the log's last entry is
--           this alert already (another daemon raised it)

local KNOWN_GEN = tonumber(ARGV[8])

local s = load()
if s.gen >= KNOWN_GEN then return { 0 } end
local last = redis.call('XREVRANGE', K_EVENTS, '+', '-', 'COUNT', 1)
if #last > 0 then
  local kind, gen, f = nil, nil, last[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'kind' then kind = f[i + 1] elseif f[i] == 'gen' then gen = tonumber(f[i + 1]) end
  end
  if kind == 'state_lost' and gen == KNOWN_GEN then return { 0 } end
end
local now = public(s)
s.gen, s.cd = KNOWN_GEN, tonumber(ARGV[10])
emit(s, 'state_lost', ARGV[9], now, 'state_lost', clock(), ARGV[11])
return { 1 }
