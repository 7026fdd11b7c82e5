-- record.lua: apply one tool call's outcome to the breaker.
-- Runs after lib.lua (KEYS and ARGV[1..7] as documented there).
--
-- ARGV[8]  -> evidence: S success, F counted failure, R counted rate limit
--             (429 beyond the deadline), T throttled (429 within the
--             deadline, not counted), N never counted, U credential rejected
-- ARGV[9]  -> ticket generation
-- ARGV[10] -> ticket lease token ('' unless the call was a probe)
-- ARGV[11] -> Retry-After, ms (0 when none)
-- ARGV[12] -> the failure in plain words ("timeout after 30s")
-- ARGV[13] -> threshold: consecutive counted failures that trip
-- ARGV[14] -> min workers: distinct workers the failures must come from
-- ARGV[15] -> rate-limit trips: consecutive R outcomes that trip
-- ARGV[16] -> cooldown for a rate-limit trip, ms (the Retry-After, jittered)
-- ARGV[17] -> credential worked: 1 when the worker has seen a success on
--             this breaker before, else 0 (with U: pause, not just alert)
-- ARGV[18..] -> cooldown schedule, ms, jittered: [1] after a trip, [k+1]
--              after k failed probes; the last entry repeats (the cap)
--
-- Returns {counted (0|1), note, snapshot}
-- The quorum rule lives here, next to the write it guards: the circuit
-- opens only when the run of failures reaches the threshold (or the
-- rate-limit run reaches its count) AND SCARD(workers) >= min workers.
--
-- Alerts raised here (each also an event in the durable log):
--   stuck_open      the second failed probe since the trip (level 2): the
--                   circuit has stayed open through two cooldown cycles.
--                   Once per open period (level only grows until it closes).
--   suspect_worker  closed, the run reached the threshold, and its failures
--                   all came from ACTOR (SCARD = 1 < min workers): ACTOR is
--                   denied for one trip cooldown after each of its failures
--                   while the fleet stays closed. Once per failure run; a
--                   success (anyone's) ends the run, another worker's
--                   failure confirms it (a trip), a Force resets it.
--   credential_revoked on U. With ARGV[17] = 1, no pin and a current
--                   ticket, it also pauses the breaker (st = paused):
--                   not a trip, no probe lifts it, only Force AUTO or
--                   CLOSED does.

local now = now_ms()
local s = load()
local dirty = expire_force(s, now)
local ev, tgen, tlease = ARGV[8], tonumber(ARGV[9]), ARGV[10]
local retry_after, desc = tonumber(ARGV[11]), ARGV[12]

local function reply(counted, note)
  if dirty then save(s, now) end
  return { counted, note, snapshot(s, now) }
end

local function cooldown(level)
  local i = math.min(level + 1, #ARGV - 17)
  return tonumber(ARGV[17 + i])
end

local function secs(ms)
  return tostring(math.ceil(ms / 1000)) .. 's'
end

local function open(from, level, cd, reason)
  s.st, s.level, s.cd = 'open', level, cd
  s.opened, s.probe_at = now, now + cd
  s.lease, s.lease_until = '', 0
  s.suspect, s.suspect_until = '', 0
  s.reason = reason
  s.gen = s.gen + 1
  dirty = true
  emit(s, 'transition', from, 'open', reason, now)
end

if s.force == '' and s.st == 'paused' then
  return reply(0, 'paused: credential rejected; outcomes are not counted until an operator resumes it')
end

if ev == 'U' then
  local current = tgen == s.gen and (s.st == 'closed' or (s.st == 'half_open' and tlease ~= ''
    and tlease == s.lease))
  if ARGV[17] == '1' and s.force == '' and current then
    local from = public(s)
    clear_run(s)
    s.st = 'paused'
    s.reason = NAME .. ': credential rejected; needs a human (a 401 after the credential had ' ..
      'worked: likely revoked or rotated; an operator resumes it with Force AUTO)'
    s.gen = s.gen + 1
    dirty = true
    emit(s, 'credential_revoked', from, 'paused', s.reason, now)
    return reply(0, 'credential rejected: breaker paused until an operator resumes it')
  end
  if s.st ~= 'paused' then -- a paused breaker has raised its alert already
    emit(s, 'credential_revoked', public(s), public(s),
      NAME .. ' rejected its credential (401): a human must check it; not a trip', now)
  end
end

-- An open circuit counts nothing, but a Retry-After may push its next
-- probe later (never earlier).
if s.force == '' and s.st == 'open' then
  if (ev == 'R' or ev == 'T') and now + retry_after > s.probe_at then
    s.probe_at = now + retry_after
    dirty = true
    return reply(0, 'circuit open: Retry-After moved the next probe later')
  end
  return reply(0, 'circuit open: outcome from before the trip')
end

if s.force == 'open' then
  return reply(0, 'forced open: outcomes are not counted')
end

if s.force == '' and s.st == 'half_open' then
  if tlease == '' or tlease ~= s.lease or tgen ~= s.gen then
    return reply(0, 'not the probe lease holder')
  end
  if ev == 'S' then
    clear_run(s)
    s.gen = s.gen + 1
    dirty = true
    emit(s, 'transition', 'half_open', 'closed', 'probe succeeded', now)
    return reply(1, '')
  end
  if ev == 'F' or ev == 'R' then
    s.last = desc
    local cd = cooldown(s.level + 1)
    if ev == 'R' then cd = math.max(cd, tonumber(ARGV[16])) end
    open('half_open', s.level + 1, cd,
      NAME .. ' still failing: the probe failed (' .. desc .. '); next probe in ' .. secs(cd))
    if s.level == 2 then
      emit(s, 'stuck_open', 'open', 'open', NAME .. ' still open after 2 cooldown cycles ' ..
        '(2 failed probes since the trip, last: ' .. desc .. '): the dependency is down; ' ..
        'the breaker is reporting the outage, not causing it', now)
    end
    return reply(1, '')
  end
  s.lease, s.lease_until = '', 0
  dirty = true
  return reply(0, 'outcome never counts: probe lease released, still half-open')
end

-- Closed (automatic or forced closed).
if tgen ~= s.gen then
  return reply(0, 'stale generation')
end
if ev == 'S' then
  if s.fails > 0 or s.rl > 0 or workers() > 0 or s.suspect ~= '' then
    s.fails, s.rl, s.last = 0, 0, ''
    s.suspect, s.suspect_until = '', 0
    redis.call('DEL', K_WORKERS)
    dirty = true
  end
  return reply(1, '')
end
if ev == 'T' then
  if s.rl > 0 then
    s.rl = 0
    dirty = true
  end
  return reply(0, 'rate limited within the deadline: not counted')
end
if ev ~= 'F' and ev ~= 'R' then
  return reply(0, 'outcome never counts')
end

s.fails = s.fails + 1
s.last = desc
if ev == 'R' then s.rl = s.rl + 1 else s.rl = 0 end
redis.call('SADD', K_WORKERS, ACTOR)
dirty = true
if s.force == 'closed' then
  return reply(1, '')
end

local n = workers()
if n >= tonumber(ARGV[14]) then
  if s.rl >= tonumber(ARGV[15]) then
    open('closed', 0, tonumber(ARGV[16]), NAME .. ' rate limited: ' .. s.rl ..
      ' consecutive 429s with a Retry-After beyond the caller\'s deadline, last: ' .. desc)
  elseif s.fails >= tonumber(ARGV[13]) then
    open('closed', 0, cooldown(0), NAME .. ' unreachable: ' .. s.fails ..
      ' consecutive failures from ' .. n .. ' workers, last: ' .. desc)
  end
elseif n == 1 and s.fails >= tonumber(ARGV[13]) then
  s.suspect_until = now + cooldown(0)
  if s.suspect ~= ACTOR then
    s.suspect = ACTOR
    emit(s, 'suspect_worker', 'closed', 'closed', NAME .. ': ' .. s.fails ..
      ' consecutive failures, all from worker ' .. ACTOR .. ', and no other worker confirms: ' ..
      'likely ' .. ACTOR .. '\'s network or config; it alone is denied while the circuit ' ..
      'stays closed, last: ' .. desc, now)
  end
end
return reply(1, '')
