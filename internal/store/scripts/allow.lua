-- allow.lua: may a call to the breaker's dependency go out now?
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there).
--
-- ARGV[8] -> lease token to hand out if this call becomes the probe
-- ARGV[9] -> probe timeout, ms (the lease's lifetime)
--
-- Returns {decision, {generation, lease_token, retry_after_ms, reason}, snapshot}
--   decision: 1 allowed, 2 probe, 3 denied_open, 4 denied_probe_in_flight,
--             5 denied_forced_open, 6 denied_suspect_worker (ARGV[7] is
--             the worker record.lua suspects), 7 denied_paused
-- Writes nothing unless the call moves the breaker (open -> half_open, a
-- new lease, a lapsed force): a worker asking about a closed breaker never
-- creates state.

local now = now_ms()
local s = load()
local dirty = expire_force(s, now)

local function reply(code, token, retry_after, reason)
  if dirty then save(s, now) end
  return { code, { s.gen, token, retry_after, reason }, snapshot(s, now) }
end

if s.force == 'open' then
  local retry = 0
  if s.force_until > 0 then retry = s.force_until - now end
  return reply(5, '', retry, NAME .. ' forced open by an operator: ' .. s.force_reason)
end
if s.force == '' and s.st == 'paused' then
  return reply(7, '', 0, s.reason)
end
if s.force == '' and s.st == 'closed' and s.suspect ~= '' and s.suspect == ACTOR
    and now < s.suspect_until then
  return reply(6, '', s.suspect_until - now, NAME .. ': only worker ' .. ACTOR ..
    ' has failed (' .. s.fails .. ' consecutive failures) and no other worker confirms: ' ..
    'likely this worker\'s network or config; the circuit stays closed for the fleet')
end
if s.force == 'closed' or s.st == 'closed' then
  return reply(1, '', 0, '')
end

if s.st == 'open' then
  if now < s.probe_at then
    return reply(3, '', s.probe_at - now, s.reason)
  end
  s.st = 'half_open'
  s.gen = s.gen + 1
  emit(s, 'transition', 'open', 'half_open', 'cooldown elapsed; one probe admitted', now)
elseif s.lease ~= '' and s.lease_until > now then
  return reply(4, '', s.lease_until - now,
    NAME .. ' is being probed by another caller; ask again after the probe')
end

-- Half-open with no live lease: this caller becomes the fleet's one probe.
s.lease = ARGV[8]
s.lease_until = now + tonumber(ARGV[9])
dirty = true
return reply(2, s.lease, 0, '')
