-- record.lua: apply one tool call's outcome to the breaker.
-- Runs with lib.lua (KEYS and ARGV[1..7] as documented there); its head,
-- up to the ==== line, runs before lib.lua's functions (scripts.go).
-- The rules: breaker.step.record and probeOutcome (internal/breaker), the
-- trip rule quorum.Judge (internal/quorum), the cooldown probe.Cooldown
-- and probe.Jitter (internal/probe).
--
-- ARGV[8]  -> evidence (quorum.EvidenceOf): S success, F counted failure,
--             R counted rate limit (429 beyond the deadline), T throttled
--             (429 within the deadline, not counted), N never counted, U
--             credential rejected, Q quota exhausted (402); an unrecognised
--             error is F under the policy's count_unrecognised, N without
-- ARGV[9]  -> ticket generation
-- ARGV[10] -> ticket lease token ('' unless the call was a probe)
-- ARGV[11] -> Retry-After, ms (0 when none; capped at the cooldown cap)
-- ARGV[12] -> the failure in plain words ("timeout after 30s")
-- ARGV[13] -> threshold: consecutive counted failures that trip
-- ARGV[14] -> min workers: distinct workers each run must come from
-- ARGV[15] -> rate-limit trips: consecutive R outcomes that trip
-- ARGV[16] -> cooldown base, ms
-- ARGV[17] -> cooldown cap, ms
-- ARGV[18] -> jitter: the policy's fraction times one uniform draw in [0, 1)
-- ARGV[19] -> credential worked: 1 when the worker has seen a success on
--             this breaker before, else 0 (with U: a vote to pause)
-- ARGV[20] -> pause TTL, ms: how long a pause lasts unless an operator
--             ends it (its pause_expiring alert is due a quarter before)
-- ARGV[21] -> window, ms: 0 for consecutive mode, else window mode (the
--             failure rate over the window decides; breaker/window.go)
-- ARGV[22] -> failure rate in (0, 1] at or above which a window trips
-- ARGV[23] -> min calls: calls a window must hold before its rate counts
-- ARGV[24] -> latency, ms: how long the call took, as its worker measured it
-- ARGV[25] -> slow call, ms: a success with a latency above it is slow
--             (breaker/slow.go); 0 counts no slow calls
-- ARGV[26] -> slow call threshold: consecutive slow calls that trip
--             (consecutive mode; 0: never)
-- ARGV[27] -> slow call rate in (0, 1]: the share of a window's calls that
--             must be slow for it to trip (window mode; 0: never)
-- ARGV[28] -> the policy's shadow field: 1 shadows the breaker unless an
--             operator's setting says otherwise (breaker/shadow.go); the
--             events of a shadowed breaker are marked shadow
-- ARGV[29] -> ticket shadow-denied: 1 when the call's Allow was a shadow
--             denial (enforced mode would not have made the call): the
--             outcome counts nothing (note shadow_denied)
-- ARGV[30] -> max open, ppm: the breaker's group's max_open_fraction in
--             millionths; 0 when the breaker is in no group (no cap)
-- ARGV[31] -> the group's members: how many the policy file lists (the
--             cap's denominator); 0 when the breaker is in no group
-- ARGV[32] -> the group's other open members, '' to count them here from
--             KEYS[9] (a single Redis: exact, atomic with the trip; on a
--             Cluster the daemon reads them just before this script:
--             breaker/cap.go states the rule, store/group.go the bound)
-- ARGV[33] -> quiet: '' to send the alerts this call raises to hooks, or
--             the mark they carry past the caller's alert quota (lib.lua
--             QUIET; breaker.Call.Quiet)
-- ARGV[34] -> the Record's id, made by the daemon for this call ('' for
--             none): a Record sent again (its reply lost on the way back,
--             the command resent) is answered as the first was and
--             applied once (docs/reliability.md, "A reply lost")
-- ARGV[35] -> how long the ids are remembered, ms (after the last one)
-- ARGV[36] -> 1 when the outcome may create state for a breaker that
--             holds none (a failure, a slow success, window mode): only
--             then, or when it holds state, is the id looked up and kept
-- ARGV[37] -> how many ids are remembered: the hash is emptied when full
-- ARGV[38] -> the call's W3C trace id ('' for none): a transition into
--             open this call causes carries it (the event's trace field)
-- KEYS[7]  -> brk:{<name>}:rec  hash: the breaker's recent Record ids,
--             each to what it answered: its counted flag (0|1), then its
--             note
--
-- Returns {counted (0|1), note, snapshot, repeat, alerts}; note is a
-- breaker.Note code; repeat is 1 when ARGV[34] was seen already (the
-- answer is the first one's, nothing is applied again), else 0; alerts is
-- how many alerts the call raised. In window mode the reply has the
-- window's calls, failures and slow calls after the call (0 after a
-- transition: the window starts empty) before alerts.
-- Publishes (never logs) a run notice, run_started or run_ended, when a
-- closed breaker's failure run starts or ends without a transition.
-- Every transition into open lasts max(the cooldown, the Retry-After of the
-- outcome that caused it), jittered.
--
-- Alerts raised here (each also an event in the durable log):
--   stuck_open      a failed probe that brings the backoff level to 2.
--   flapping        a trip while the breaker keeps the backoff level of
--                   its last open period (backoff_until ahead): it opens
--                   one level up.
--   suspect_worker  closed, the run reached the threshold, and its failures
--                   all came from ACTOR: ACTOR is denied for one trip
--                   cooldown after each of its failures while the fleet
--                   stays closed. Once per failure run.
--                   The slow calls past slow_call_threshold (or
--                   slow_call_rate) all from ACTOR: the same, cause
--                   slow_suspect (slow_trip).
--   open_fraction_cap a trip from closed that would leave more than the
--                   group's max_open_fraction of its members open:
--                   the breaker stays closed, the note is
--                   "<cause>:<open>:<members>". Once until a fast success
--                   or a transition (the capped field).
--   credential_revoked on U. With ARGV[19] = 1, no pin and a current
--                   ticket, ACTOR votes to pause: min workers distinct
--                   votes pause the breaker (st = paused) for the pause
--                   TTL; a lone vote isolates ACTOR (suspect) instead.

local EVIDENCE = ARGV[8]
local TICKET_GEN = tonumber(ARGV[9])
local TICKET_LEASE = ARGV[10]
local RETRY_AFTER = tonumber(ARGV[11])
local LAST = ARGV[12]
local THRESHOLD = tonumber(ARGV[13])
local MIN_WORKERS = tonumber(ARGV[14])
local RATE_LIMIT_TRIPS = tonumber(ARGV[15])
local COOLDOWN_BASE = tonumber(ARGV[16])
local COOLDOWN_CAP = tonumber(ARGV[17])
local JITTER = tonumber(ARGV[18])
local CREDENTIAL_WORKED = ARGV[19] == '1'
local PAUSE_TTL = tonumber(ARGV[20])
local WINDOW_MS = tonumber(ARGV[21]) or 0
local FAILURE_RATE = tonumber(ARGV[22]) or 1
local MIN_CALLS = tonumber(ARGV[23]) or 0
local LATENCY = tonumber(ARGV[24]) or 0
local SLOW_CALL = tonumber(ARGV[25]) or 0
local SLOW_THRESHOLD = tonumber(ARGV[26]) or 0
local SLOW_RATE = tonumber(ARGV[27]) or 0
POLICY_SHADOW = ARGV[28] == '1'
local TICKET_SHADOW = ARGV[29] == '1'
local MAX_OPEN_PPM = tonumber(ARGV[30]) or 0
local GROUP_MEMBERS, GROUP_OPEN = tonumber(ARGV[31]) or 0, tonumber(ARGV[32])
QUIET = ARGV[33] or ''
local RECORD_ID, RECORD_TTL, MAY_CREATE = ARGV[34] or '', tonumber(ARGV[35]) or 0, ARGV[36] == '1'
local RECORD_KEEP = tonumber(ARGV[37]) or 0
local TRACE = ARGV[38] or ''
local K_RECORD = KEYS[7]
-- KEEP is the most distinct workers a run keeps (quorum.Rule.Keep: the
-- quorum, or quorum.MaxWorkers = 64 when larger): a new worker past it
-- still counts its failure, slow call or vote, but is not added, so no
-- token acting as many workers grows a run's set or window without end.
local KEEP = math.max(MIN_WORKERS, 64)
-- SLOW: this outcome is a slow success (breaker.step.slow).
local SLOW = SLOW_CALL > 0 and EVIDENCE == 'S' and LATENCY > SLOW_CALL

-- The common healthy call, answered before lib.lua's functions are built:
-- a success on a breaker that holds no state (closed at generation 0, no
-- run to end) changes nothing unless it is slow, counted in a window, on
-- a stale or shadow-denied ticket, or an id to keep; the rules below give
-- this same answer.
if #RAW == 0 and EVIDENCE == 'S' and TICKET_GEN == 0 and WINDOW_MS <= 0 and not SLOW
    and not TICKET_SHADOW and not (RECORD_ID ~= '' and MAY_CREATE) then
  return { 1, '', {}, 0, 0 }
end

-- ==== lib.lua's functions (scripts.go)

-- join adds ACTOR to the run's worker set key unless it holds KEEP
-- members (breaker.addMember).
local function join(key)
  if redis.call('SCARD', key) < KEEP then redis.call('SADD', key, ACTOR) end
end

local s = load()
local dirty = expire_force(s)
if expire_pause(s) then dirty = true end
local ev = EVIDENCE

-- run_open: a success on s would change it (breaker.State.RunOpen).
local function run_open()
  return s.st == 'closed' and (s.fails > 0 or s.rl > 0 or s.slow > 0 or s.suspect ~= '')
end
local RUN_WAS, GEN_WAS, ST_WAS = run_open(), s.gen, s.st

-- run_notice publishes, live only (never in the durable log), that a
-- closed breaker's failure run started or ended without a transition
-- (breaker.runNotice): fast-mode clients send successes only while one
-- runs. The payload reads as an event with an empty id (store.DecodeEvent).
local function run_notice()
  if s.gen ~= GEN_WAS or ST_WAS ~= 'closed' or s.st ~= 'closed' then return end
  local is = run_open()
  if is == RUN_WAS then return end
  local kind = 'run_ended'
  if is then kind = 'run_started' end
  redis.call('PUBLISH', CHANNEL, cjson.encode({ '', 'breaker', NAME, 'kind', kind,
    'gen', tostring(s.gen), 'failures', tostring(s.fails), 'actor', ACTOR }))
end

-- CAP_NOTE is the note of a Record whose trip the cap stopped.
local CAP_NOTE = nil

-- win_reply is the window's calls, failures and slow calls as
-- window_record left them; reply reads them when no window_record ran.
local win_reply

-- REMEMBER: this Record's id is looked up, and kept with its answer
-- (ARGV[34..37]); REPEAT: it was seen already; RECENT: how many ids the
-- breaker remembers.
local REMEMBER = RECORD_ID ~= '' and (s.stored or MAY_CREATE)
local REPEAT, RECENT = 0, 0

local function reply(counted, note)
  if dirty then save(s) end
  run_notice()
  note = note or CAP_NOTE or ''
  if REMEMBER and REPEAT == 0 then
    if RECENT >= RECORD_KEEP then redis.call('DEL', K_RECORD) end
    redis.call('HSET', K_RECORD, RECORD_ID, tostring(counted) .. note)
    redis.call('PEXPIRE', K_RECORD, RECORD_TTL)
  end
  if WINDOW_MS <= 0 then return { counted, note, snapshot(s), REPEAT, ALERTS } end
  -- Window mode: the window's totals too (of the current generation:
  -- empty after a transition), as read.lua gives them.
  local t = win_reply
  if s.gen ~= GEN_WAS then
    t = { 0, 0, 0 } -- a transition: the window starts empty
  elseif t == nil then
    local calls, fails, _, slow = win_totals(win_load(s.gen, win_bucket(WINDOW_MS)))
    t = { calls, fails, slow }
  end
  return { counted, note, snapshot(s), REPEAT, t[1], t[2], t[3], ALERTS }
end

-- group_open returns the group's other open members: from ARGV (a
-- Cluster), or counted from the index in this atomic step (expired
-- entries, scored now or before, are dropped first).
local function group_open()
  if GROUP_OPEN ~= nil then return GROUP_OPEN end
  if K_GOPEN == nil then return 0 end
  redis.call('ZREMRANGEBYSCORE', K_GOPEN, '-inf', clock())
  local open = redis.call('ZCARD', K_GOPEN)
  if redis.call('ZSCORE', K_GOPEN, NAME) then open = open - 1 end
  return open
end

-- cap_trip applies the group's open-fraction cap to a trip from closed
-- about to happen for cause (breaker.step.capTrip): true when it is
-- capped, and the caller must then leave the breaker closed as it is.
local function cap_trip(cause)
  if MAX_OPEN_PPM <= 0 then return false end
  local open = group_open()
  if open <= 0 or (open + 1) * 1000000 <= MAX_OPEN_PPM * GROUP_MEMBERS then return false end
  CAP_NOTE = 'open_fraction_capped'
  if s.capped == 0 then
    s.capped = 1
    dirty = true
    emit(s, 'open_fraction_cap', 'closed', 'closed', 'open_fraction_cap', clock(),
      cause .. ':' .. tostring(open + 1) .. ':' .. tostring(GROUP_MEMBERS))
  end
  return true
end

-- cooldown: the open period after level failed probes under this call's
-- policy (open_period).
local function cooldown(level, retry_after)
  return open_period(COOLDOWN_BASE, COOLDOWN_CAP, JITTER, level, retry_after)
end

local function open(from, level, cd, cause)
  s.st, s.level, s.cd, s.cause = 'open', level, cd, cause
  s.opened, s.probe_at, s.backoff_until = clock(), clock() + cd, 0
  s.lease, s.lease_until, s.lease_by = '', 0, ''
  s.suspect, s.suspect_until = '', 0
  s.slow, s.slow_by, s.slow_lat = 0, '', ''
  s.capped = 0
  s.gen = s.gen + 1
  dirty = true
  emit(s, 'transition', from, 'open', cause, clock(), nil, nil, TRACE)
end

-- trip opens a closed breaker (cause: what tripped it) at the base
-- cooldown, or one level above the backoff it kept since a probe closed
-- it, raising flapping (breaker step.trip).
local function trip(cause)
  local level, kept = trip_level(s)
  open('closed', level, cooldown(level, RETRY_AFTER), cause)
  if kept then
    emit(s, 'flapping', 'open', 'open', 'flapping', clock())
  end
end

-- push_sample appends this call's latency to the slow sample, keeping
-- the last 16 (breaker.pushSample, breaker.SlowSample).
local function push_sample()
  local lat = {}
  for v in string.gmatch(s.slow_lat, '[^,]+') do lat[#lat + 1] = v end
  lat[#lat + 1] = tostring(LATENCY)
  while #lat > 16 do table.remove(lat, 1) end
  s.slow_lat = table.concat(lat, ',')
end

-- suspect denies ACTOR, the one worker behind a run past its limit, for a
-- trip cooldown from now, and raises suspect_worker (cause) once per
-- worker (breaker.step.suspect).
local function suspect(cause)
  s.suspect_until = clock() + cooldown(0, 0)
  if s.suspect ~= ACTOR then
    s.suspect = ACTOR
    emit(s, 'suspect_worker', 'closed', 'closed', cause, clock())
  end
end

-- slow_trip judges slow calls that reached their limit (breaker.slowTrip):
-- open with MIN_WORKERS distinct workers behind them, else flag the one
-- worker behind them all. s.last holds the measure (breaker.SlowMeasure).
local function slow_trip(slow, calls, sworkers)
  local lat = {}
  for v in string.gmatch(s.slow_lat, '[^,]+') do lat[#lat + 1] = tonumber(v) end
  table.sort(lat)
  local p50 = 0
  if #lat > 0 then p50 = lat[math.floor((#lat - 1) / 2) + 1] end
  local last = 'slow:' .. tostring(slow) .. ':' .. tostring(calls) .. ':' .. tostring(p50) .. ':' ..
    tostring(#lat) .. ':' .. tostring(SLOW_CALL)
  local q = quorum(#sworkers, MIN_WORKERS)
  if q == 'trip' then
    if cap_trip('slow') then return end
    s.fails, s.last = slow, last
    redis.call('DEL', K_WORKERS)
    redis.call('SADD', K_WORKERS, unpack(sworkers))
    trip('slow')
  elseif q == 'suspect' then
    s.last, s.cause = last, 'slow_suspect'
    suspect('slow_suspect')
  end
end

-- The same Record sent again: the first one's answer, nothing applied
-- twice (the lapsed pin or pause above is the clock's doing, not the
-- Record's).
if REMEMBER then
  local recent = redis.call('HGETALL', K_RECORD)
  RECENT = #recent / 2
  for i = 1, #recent, 2 do
    if recent[i] == RECORD_ID then
      REPEAT = 1
      local first = recent[i + 1]
      return reply(tonumber(string.sub(first, 1, 1)), string.sub(first, 2))
    end
  end
end

if TICKET_SHADOW then
  return reply(0, 'shadow_denied')
end
if s.force == '' and s.st == 'paused' then
  return reply(0, 'paused')
end

-- pause_vote counts ACTOR's rejected working credential toward a pause
-- (breaker.pauseVote): min workers distinct votes pause the breaker for
-- the pause TTL; a lone vote isolates ACTOR while the fleet keeps it.
local function pause_vote(cause)
  join(K_PAUSE)
  dirty = true
  if quorum(redis.call('SCARD', K_PAUSE), MIN_WORKERS) == 'trip' then
    fresh(s)
    s.st, s.cause = 'paused', cause
    s.pause_until = clock() + PAUSE_TTL
    s.pause_warn = s.pause_until - math.floor(PAUSE_TTL / 4)
    s.gen = s.gen + 1
    return true
  end
  if s.st == 'closed' then
    s.suspect, s.suspect_until = ACTOR, clock() + cooldown(0, 0)
  end
  return false
end

-- A rejected credential (U) or an exhausted quota (Q): an alert, and a
-- vote to pause from a current ticket with no pin (for U, only from a
-- worker that had seen the credential work) (breaker.pauseEvidence).
if ev == 'U' or ev == 'Q' then
  local kind, pause, alert, lone = 'credential_revoked', 'credential', 'credential_alert', 'credential_lone'
  local paused, isolated, vote = 'credential_paused', 'credential_lone', CREDENTIAL_WORKED
  if ev == 'Q' then
    kind, pause, alert, lone = 'quota_exhausted', 'quota', 'quota_alert', 'quota_lone'
    paused, isolated, vote = 'quota_paused', 'quota_lone', true
  end
  local current = TICKET_GEN == s.gen and (s.st == 'closed' or (s.st == 'half_open' and
    TICKET_LEASE ~= '' and TICKET_LEASE == s.lease))
  if not vote or s.force ~= '' or not current then
    emit(s, kind, public(s), public(s), alert, clock())
  else
    local from = public(s)
    if pause_vote(pause) then
      emit(s, kind, from, 'paused', pause, clock())
      return reply(0, paused)
    end
    emit(s, kind, public(s), public(s), lone, clock())
    if s.st == 'closed' then
      return reply(0, isolated)
    end
  end
end

-- An open circuit counts nothing, but a 429's Retry-After may push its
-- next probe later (never earlier).
if s.force == '' and s.st == 'open' then
  if (ev == 'R' or ev == 'T') and clock() + RETRY_AFTER > s.probe_at then
    s.probe_at = clock() + RETRY_AFTER
    dirty = true
    return reply(0, 'open_extended')
  end
  return reply(0, 'open')
end

if s.force == 'open' then
  return reply(0, 'forced_open')
end

if s.force == '' and s.st == 'half_open' then
  if TICKET_LEASE == '' or TICKET_LEASE ~= s.lease or TICKET_GEN ~= s.gen then
    return reply(0, 'not_lease_holder')
  end
  dirty = true
  if s.lapser == s.lease_by then -- the holder settled: its run of lapses ends
    s.lapser, s.lapses = '', 0
  end
  if ev == 'S' and not SLOW then
    local level, kept_until = s.level, clock() + BACKOFF_KEPT * s.cd
    fresh(s)
    s.level, s.backoff_until = level, kept_until -- one good probe is no proof of health
    s.gen = s.gen + 1
    emit(s, 'transition', 'half_open', 'closed', 'probe_succeeded', clock())
    return reply(1)
  end
  if ev == 'F' or ev == 'R' or ev == 'S' then -- a failure, or a slow success
    s.last = LAST
    open('half_open', s.level + 1, cooldown(s.level + 1, RETRY_AFTER), 'probe_failed')
    if s.level == 2 then
      emit(s, 'stuck_open', 'open', 'open', 'stuck_open', clock())
    end
    return reply(1)
  end
  s.lease, s.lease_until, s.lease_by = '', 0, ''
  if ev == 'T' then
    -- No verdict: the vendor asked for a wait the caller could afford.
    s.probe_at = clock() + RETRY_AFTER
    return reply(0, 'probe_throttled')
  end
  return reply(0, 'probe_released')
end

-- window_record applies the outcome to a closed breaker in window mode
-- with a current ticket (breaker.step.windowRecord): the window is
-- written whole on every call it counts.
local function window_record()
  local failed = ev == 'F' or ev == 'R'
  if not failed and ev ~= 'S' then
    if ev == 'T' then return reply(0, 'throttled') end
    return reply(0, 'neutral')
  end
  local slow = not failed and SLOW
  local cur = win_bucket(WINDOW_MS)
  local w = win_load(s.gen, cur)
  -- keep_worker sets ACTOR's last bucket among a window's live workers,
  -- unless it is new there and they number KEEP (breaker.keepWorker).
  local function keep_worker(workers)
    local n = 0
    for _ in pairs(workers) do n = n + 1 end
    if workers[ACTOR] ~= nil or n < KEEP then workers[ACTOR] = cur end
  end
  w.calls[cur] = (w.calls[cur] or 0) + 1
  if failed then
    w.fails[cur] = (w.fails[cur] or 0) + 1
    keep_worker(w.workers)
  end
  if slow then
    w.slow[cur] = (w.slow[cur] or 0) + 1
    keep_worker(w.sworkers)
  end
  local fields = { 'gen', tostring(s.gen) }
  for b, n in pairs(w.calls) do fields[#fields + 1] = 'c' .. b; fields[#fields + 1] = tostring(n) end
  for b, n in pairs(w.fails) do fields[#fields + 1] = 'f' .. b; fields[#fields + 1] = tostring(n) end
  for k, b in pairs(w.workers) do fields[#fields + 1] = 'w:' .. k; fields[#fields + 1] = tostring(b) end
  for b, n in pairs(w.slow) do fields[#fields + 1] = 's' .. b; fields[#fields + 1] = tostring(n) end
  for k, b in pairs(w.sworkers) do fields[#fields + 1] = 'v:' .. k; fields[#fields + 1] = tostring(b) end
  redis.call('DEL', K_WIN)
  redis.call('HSET', K_WIN, unpack(fields))
  redis.call('PEXPIRE', K_WIN, WINDOW_MS)
  do
    local calls, fails, _, nslow = win_totals(w)
    win_reply = { calls, fails, nslow }
  end
  if slow then
    push_sample()
    dirty = true
    if s.force == 'closed' or SLOW_RATE <= 0 then return reply(1) end
    local calls, _, _, nslow, sworkers = win_totals(w)
    if calls >= MIN_CALLS and nslow >= SLOW_RATE * calls then
      slow_trip(nslow, calls, sworkers)
    end
    return reply(1)
  end
  if not failed then return reply(1) end
  s.last = LAST
  dirty = true
  if s.force == 'closed' then return reply(1) end
  local calls, fails, fworkers = win_totals(w)
  if calls < MIN_CALLS or fails < FAILURE_RATE * calls then return reply(1) end
  local q = quorum(#fworkers, MIN_WORKERS)
  if q == 'trip' then
    if cap_trip('window') then return reply(1) end
    s.fails = fails
    redis.call('SADD', K_WORKERS, unpack(fworkers))
    trip('window')
  elseif q == 'suspect' then
    s.fails, s.cause = fails, 'window_suspect'
    suspect('window_suspect')
  end
  return reply(1)
end

-- Closed (automatic, or pinned closed: counted, never tripped).
if TICKET_GEN ~= s.gen then
  return reply(0, 'stale')
end
if WINDOW_MS > 0 then
  return window_record()
end
if SLOW then
  -- A slow success ends the failure run and extends the slow run
  -- (breaker.step.slowRecord).
  s.fails, s.rl, s.last = 0, 0, ''
  if s.cause ~= 'slow_suspect' then s.suspect, s.suspect_until = '', 0 end
  redis.call('DEL', K_WORKERS, K_RL, K_PAUSE)
  s.slow = s.slow + 1
  local by = {}
  local seen = false
  for v in string.gmatch(s.slow_by, '[^\n]+') do
    by[#by + 1] = v
    if v == ACTOR then seen = true end
  end
  if not seen and #by < KEEP then
    by[#by + 1] = ACTOR
    table.sort(by)
  end
  s.slow_by = table.concat(by, '\n')
  push_sample()
  dirty = true
  if s.force ~= 'closed' and SLOW_THRESHOLD > 0 and s.slow >= SLOW_THRESHOLD then
    slow_trip(s.slow, 0, by)
  end
  return reply(1)
end
if ev == 'S' then
  -- (a closed breaker with pause votes always has a suspect: the lone
  -- voter, or a worker failing alone after it; so no SCARD is needed)
  if s.fails > 0 or s.rl > 0 or s.suspect ~= '' or s.slow > 0 or s.capped ~= 0 then
    s.fails, s.rl, s.last = 0, 0, ''
    s.capped = 0
    s.suspect, s.suspect_until = '', 0
    s.slow, s.slow_by, s.slow_lat = 0, '', ''
    if s.cause == 'slow_suspect' then s.cause = '' end
    redis.call('DEL', K_WORKERS, K_RL, K_PAUSE)
    dirty = true
  end
  return reply(1)
end
if ev == 'T' then
  if s.rl > 0 then
    s.rl = 0
    redis.call('DEL', K_RL)
    dirty = true
  end
  return reply(0, 'throttled')
end
if ev ~= 'F' and ev ~= 'R' then
  return reply(0, 'neutral')
end

s.fails = s.fails + 1
s.last = LAST
if ev == 'R' then
  s.rl = s.rl + 1
  join(K_RL)
else
  s.rl = 0
  redis.call('DEL', K_RL)
end
join(K_WORKERS)
dirty = true
if s.force == 'closed' then
  return reply(1)
end

-- The trip rule (quorum.Judge): each run over its own distinct workers.
local q = nil
if s.fails >= THRESHOLD then q = quorum(workers(s), MIN_WORKERS) end
if s.rl >= RATE_LIMIT_TRIPS and quorum(redis.call('SCARD', K_RL), MIN_WORKERS) == 'trip' then
  if not cap_trip('rate_limit') then trip('rate_limit') end
elseif q == 'trip' then
  if not cap_trip('trip') then trip('trip') end
elseif q == 'suspect' then
  if s.cause == 'slow_suspect' then s.cause = '' end -- the failure run's suspect now
  suspect('suspect')
end
return reply(1)
