-- lib.lua: the prologue shared by every breakerd script, never run alone.
-- scripts.go composes each script once, at package init: this file's head
-- (up to the ==== line), the operation's own head (its ARGV bindings and
-- fast path, up to its ==== line; none for most), the rest of this file,
-- then the rest of the operation. The rules these scripts execute are
-- stated in Go in internal/breaker; the differential test proves the two
-- agree. Change both, or neither. A fast path answers only what the rules
-- after it would answer the same way.
--
-- Every script takes the same KEYS and leading ARGV:
--
-- KEYS[1] -> brk:{<name>}:state   hash: the breaker's state (fields below)
-- KEYS[2] -> brk:{<name>}:workers set: distinct workers in the failure run
-- KEYS[3] -> brk:{<name>}:events  stream: the breaker's durable event log
-- KEYS[4] -> brk:{<name>}:rl      set: distinct workers behind the run's
--                                 counted 429s (the rate-limit quorum)
-- KEYS[5] -> brk:{<name>}:pause   set: distinct workers whose working
--                                 credential was rejected (the pause quorum)
-- KEYS[6] -> brk:{<name>}:win     hash: the failure-rate window (window
--                                 mode only; fields below, breaker.Window)
-- KEYS[7] -> brk:{<name>}:check  (check_lease.lua), or
--            brk:{<name>}:rec (record.lua: the recent Records' ids,
--            see there); passed before the group's keys, unread by the
--            other scripts
-- KEYS[8] -> brk:grp:{<group>}:known  sorted set: the breaker's group's
--            members holding state, scored by when their state expires
--            (ms; +inf for a pin without an end)
-- KEYS[9] -> brk:grp:{<group>}:open   sorted set: of them, those open
--            (breaker.State.Denies), scored with when they stop being open
--            by themselves (a pin's or a pause's end), else the same
--            KEYS[8] and KEYS[9] are passed only on a single Redis (not a
--            Cluster: they live in the group's slot) and only for a
--            breaker in a group (a policy file's groups); with them,
--            save() keeps the breaker's entries in the index in the same
--            atomic step as its state (breaker/cap.go).
-- --
-- ARGV[1] -> breaker name
-- ARGV[2] -> pinned time, ms since epoch: 0 in production, where Redis
--            TIME is the fleet's one clock; tests on a real Redis pin it
--            to move time without sleeping
-- ARGV[3] -> retention, ms: how long a verdict outlives its last write
--            (the policy's cooldown cap plus probe timeout)
-- ARGV[4] -> events stream MAXLEN (approximate)
-- ARGV[5] -> events stream retention, ms
-- ARGV[6] -> pub/sub channel for live events
-- ARGV[7] -> actor: the worker id or operator behind this call
--
-- State hash fields (absent means zero or empty; breaker.State in Go):
--   st          closed | open | half_open | paused (a rejected credential:
--               only an operator's Force AUTO or CLOSED ends it)
--   gen         generation, +1 on every transition and Force
--   fails       consecutive counted failures
--   rl          consecutive counted 429s ending the run
--   last        the last counted failure, in plain words
--   opened      ms: when the circuit last opened
--   probe_at    ms: when the circuit admits its next probe
--   cd          ms: the open period, jitter and Retry-After included
--   level       the backoff level: failed probes since the circuit first
--               opened, plus the re-trips while a backoff was kept
--   backoff_until ms: a closed breaker a probe closed keeps level until
--               then; a trip before opens one level up (probe.TripLevel)
--   cause       why it is open or paused (breaker.Cause; Go renders words)
--   lease       the probe lease token (half_open only)
--   lease_until ms: when the lease lapses
--   lease_by    the worker holding the lease
--   lapser, lapses  the last worker that let a lease lapse unsettled, and
--               how many in a row
--   noprobe, noprobe_until (ms)  a worker refused probes after 3 lapses
--   pause_until ms: when a pause lapses by itself
--   pause_warn  ms: when its pause_expiring alert is due (0 once raised)
--   force       open | closed (an operator's pin)
--   force_reason, force_by, force_until (ms; 0 = until AUTO)
--   suspect     the worker that alone failed past the threshold (closed
--               only; cleared with the failure run)
--   suspect_until ms: until when Allow denies the suspect worker
--   slow        consecutive slow calls (slow_call; consecutive mode)
--   slow_by     the slow run's distinct workers, sorted, joined by "\n"
--   slow_lat    the last 16 slow latencies, ms, oldest first, joined by ","
--               (breaker/slow.go; the reason's p50 comes from it)
--   shadow      an operator's shadow setting: on | off ('' follows the
--               policy; breaker/shadow.go). Kept by every transition and
--               by AUTO; while set, the keys never expire (like a pin
--               without a TTL)
--   capped      1 once a trip was stopped by the group's open-fraction cap
--               since the runs last ended (breaker/cap.go)
--
-- Window hash fields (window mode; breaker.Window in Go): gen, the
-- generation it belongs to (any other reads as empty: the window starts
-- empty after every transition); c<bucket> calls and f<bucket> failures,
-- bucket = floor(ms / bucket length); w:<worker> that worker's last
-- failing bucket; s<bucket> slow calls and v:<worker> that worker's last
-- slow bucket (slow_call).
--
-- Time comes only from Redis TIME (or the tests' pin): no daemon's clock
-- decides anything. Lease and force expiry are judged against that time,
-- not by Redis key TTLs; TTLs only collect abandoned state.

local K_STATE, K_WORKERS, K_EVENTS, K_RL, K_PAUSE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_WIN = KEYS[6]
local K_GKNOWN, K_GOPEN = KEYS[8], KEYS[9]
local NAME = ARGV[1]
local PINNED = tonumber(ARGV[2])
local RETENTION = tonumber(ARGV[3])
local EVENTS_MAXLEN = ARGV[4]
local EVENTS_RETENTION = ARGV[5]
local CHANNEL = ARGV[6]
local ACTOR = ARGV[7]

-- POLICY_SHADOW is the policy's shadow field (breaker.Params.Shadow). A
-- script that can emit events sets it from its own ARGV before anything
-- reads it (allow.lua, record.lua, force.lua, recover.lua); the others
-- leave it false.
local POLICY_SHADOW = false

-- QUIET marks the alerts this call raises past its caller's alert quota
-- (breaker.Call.Quiet): '' sends them; record.lua sets it from its ARGV.
-- The first alert stores the mark, every later one 'quiet'. ALERTS counts
-- the alerts raised (breaker.Alert: not a transition, not a Force).
local QUIET = ''
local ALERTS = 0

-- RAW is the state hash as stored (HGETALL): every script's first
-- command, read before the functions below are built so that an
-- operation's fast path can answer a breaker that holds no state without
-- them. load() decodes it.
local RAW = redis.call('HGETALL', K_STATE)

-- ==== the operation's bindings and fast path, then lib.lua's functions (scripts.go)

-- clock is the time every decision of this call is made at, ms since the
-- epoch: read once, and only when a decision needs it (a breaker that
-- holds no state decides without it, so a healthy call costs no TIME).
local NOW = nil
local function clock()
  if NOW == nil then
    if PINNED > 0 then
      NOW = PINNED
    else
      local t = redis.call('TIME')
      NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
  end
  return NOW
end

-- The stored fields, in the order save() writes them.
local FIELDS = { 'st', 'gen', 'fails', 'rl', 'last', 'opened', 'probe_at', 'cd', 'level', 'backoff_until', 'cause',
  'lease', 'lease_until', 'lease_by', 'lapser', 'lapses', 'noprobe', 'noprobe_until',
  'pause_until', 'pause_warn', 'force', 'force_reason', 'force_by', 'force_until', 'suspect',
  'suspect_until', 'slow', 'slow_by', 'slow_lat', 'shadow', 'capped' }
local NUMERIC = { gen = true, fails = true, rl = true, opened = true, probe_at = true,
  cd = true, level = true, backoff_until = true, lease_until = true, lapses = true, noprobe_until = true,
  pause_until = true, pause_warn = true, force_until = true, suspect_until = true, slow = true,
  capped = true }

-- shadowing reports whether s is shadowed (breaker.Shadowing): no pin,
-- and the operator's setting on, or no setting and the policy's shadow.
local function shadowing(s)
  return s.force == '' and (s.shadow == 'on' or (s.shadow == '' and POLICY_SHADOW))
end

-- empty returns a fresh closed state at generation 0 (no key).
local function empty()
  local s = { st = 'closed' }
  for _, f in ipairs(FIELDS) do
    if NUMERIC[f] then s[f] = 0 elseif f ~= 'st' then s[f] = '' end
  end
  return s
end

-- load returns the stored state; s.stored says whether the hash exists
-- (the worker sets never outlive it: they share its TTL and are deleted
-- with the run it describes).
local function load()
  local s = empty()
  s.stored = #RAW > 0
  for i = 1, #RAW, 2 do
    local f, v = RAW[i], RAW[i + 1]
    if NUMERIC[f] then s[f] = tonumber(v) or 0 elseif s[f] ~= nil then s[f] = v end
  end
  return s
end

-- public names the state as the API does (forced states included).
local function public(s)
  if s.force == 'open' then return 'forced_open' end
  if s.force == 'closed' then return 'forced_closed' end
  return s.st
end

-- fresh sets s to a fresh closed state (generation kept) and forgets the
-- failure run's workers. With unpin it also drops an operator's pin.
local function fresh(s, unpin)
  s.st, s.fails, s.rl, s.last, s.level, s.backoff_until, s.cause = 'closed', 0, 0, '', 0, 0, ''
  s.opened, s.probe_at, s.cd, s.lease, s.lease_until, s.lease_by = 0, 0, 0, '', 0, ''
  s.lapser, s.lapses, s.noprobe, s.noprobe_until, s.pause_until, s.pause_warn = '', 0, '', 0, 0, 0
  s.suspect, s.suspect_until = '', 0
  s.slow, s.slow_by, s.slow_lat = 0, '', ''
  s.capped = 0
  if unpin then s.force, s.force_reason, s.force_by, s.force_until = '', '', '', 0 end
  redis.call('DEL', K_WORKERS, K_RL, K_PAUSE)
end

-- holds_nothing reports whether s has no field to store (breaker.State
-- Fields is empty): a fresh closed breaker at generation 0.
local function holds_nothing(s)
  for _, f in ipairs(FIELDS) do
    local v = s[f]
    if v ~= 0 and v ~= '' and not (f == 'st' and v == 'closed') then return false end
  end
  return true
end

-- denies reports whether s counts as open in its group's index
-- (breaker.State.Denies): open, half-open, paused or pinned open.
local function denies(s)
  if s.force == 'open' then return true end
  if s.force == 'closed' then return false end
  return s.st ~= 'closed'
end

-- index keeps the breaker's entries in its group's index (KEYS[8], KEYS[9];
-- a single Redis only, see above): known while it holds state, scored with
-- deadline (when its state expires, ms, or '+inf'); open while it denies,
-- scored with when it stops denying by itself (a pin's or a pause's end:
-- breaker.State.OpenUntil), else the deadline. A nil deadline (no state
-- kept) removes it from both. Entries that expired (scored now or before)
-- go first, as group.lua's do, so the index holds only breakers with
-- state however many a worker names.
local function index(s, deadline)
  if K_GKNOWN == nil then return end
  if deadline == nil then
    redis.call('ZREM', K_GKNOWN, NAME)
    redis.call('ZREM', K_GOPEN, NAME)
    return
  end
  redis.call('ZREMRANGEBYSCORE', K_GKNOWN, '-inf', clock())
  redis.call('ZREMRANGEBYSCORE', K_GOPEN, '-inf', clock())
  redis.call('ZADD', K_GKNOWN, deadline, NAME)
  if denies(s) then
    local until_ = deadline
    if s.force == 'open' and s.force_until > 0 then
      until_ = s.force_until
    elseif s.force == '' and s.st == 'paused' and s.pause_until > 0 then
      until_ = s.pause_until
    end
    redis.call('ZADD', K_GOPEN, until_, NAME)
  else
    redis.call('ZREM', K_GOPEN, NAME)
  end
end

-- save writes s back (breaker.State.TTL in Go). A closed breaker with no
-- failures and no pin keeps only its generation (so late tickets stay
-- fenced) until the retention lapses; a generation of 0 keeps no key at
-- all. A pin without a TTL never expires: only an operator ends it.
local function save(s)
  redis.call('DEL', K_STATE)
  local fields = {}
  for _, f in ipairs(FIELDS) do
    local v = s[f]
    if v ~= 0 and v ~= '' and not (f == 'st' and v == 'closed') then
      fields[#fields + 1] = f
      fields[#fields + 1] = tostring(v)
    end
  end
  if #fields == 0 then
    index(s, nil)
    return
  end
  redis.call('HSET', K_STATE, unpack(fields))
  if (s.force ~= '' and s.force_until == 0) or s.shadow ~= '' then
    for _, k in ipairs({ K_STATE, K_WORKERS, K_RL, K_PAUSE }) do redis.call('PERSIST', k) end
    index(s, '+inf')
    return
  end
  local ttl = RETENTION
  if s.probe_at > 0 or s.lease_until > 0 or s.force_until > 0 or s.pause_until > 0 or s.backoff_until > 0 then
    local now = clock()
    ttl = ttl + math.max(0, s.probe_at - now, s.lease_until - now, s.force_until - now,
      s.pause_until - now, s.backoff_until - now)
  end
  for _, k in ipairs({ K_STATE, K_WORKERS, K_RL, K_PAUSE }) do redis.call('PEXPIRE', k, ttl) end
  if K_GKNOWN ~= nil then index(s, clock() + ttl) end
end

-- workers counts the failure run's distinct workers: the set is empty
-- whenever the run is (fails = 0), so that case costs no SCARD.
local function workers(s)
  if s.fails == 0 then return 0 end
  return redis.call('SCARD', K_WORKERS)
end

-- emit appends an event to the durable log and publishes it live. The
-- live payload is the same entry: a JSON array of its stream id and then
-- the field/value strings XADD stored (store.DecodeEvent reads it). The
-- events of a shadowed breaker add shadow = 1 (breaker.Event.Shadow). Events
-- carry causes and numbers; Go renders their words (breaker.EventReason).
-- trace, when given and not '', is the causing call's trace id
-- (breaker.Event.Trace), stored as trace.
local function emit(s, kind, from, to, cause, at, note, actor, trace)
  local fields = { 'breaker', NAME, 'kind', kind, 'from', from, 'to', to,
    'gen', tostring(s.gen), 'cause', cause, 'failures', tostring(s.fails),
    'workers', tostring(workers(s)), 'rl', tostring(s.rl), 'cooldown_ms', tostring(s.cd),
    'at_ms', tostring(at), 'actor', actor or ACTOR, 'last', s.last, 'note', note or '' }
  if shadowing(s) then
    fields[#fields + 1] = 'shadow'
    fields[#fields + 1] = '1'
  end
  if trace and trace ~= '' then
    fields[#fields + 1] = 'trace'
    fields[#fields + 1] = trace
  end
  if kind ~= 'transition' and kind ~= 'forced' then
    ALERTS = ALERTS + 1
    if QUIET ~= '' then
      fields[#fields + 1] = 'quiet'
      fields[#fields + 1] = QUIET
      QUIET = 'quiet'
    end
  end
  local id = redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*', unpack(fields))
  redis.call('PEXPIRE', K_EVENTS, EVENTS_RETENTION)
  table.insert(fields, 1, id)
  redis.call('PUBLISH', CHANNEL, cjson.encode(fields))
end

-- expire_force ends a pin whose TTL has run out, as AUTO would: closed with
-- fresh counts. Returns true when it changed s (the caller must save).
local function expire_force(s)
  if s.force == '' or s.force_until == 0 or clock() < s.force_until then return false end
  local from = public(s)
  local at = s.force_until
  fresh(s, true)
  s.gen = s.gen + 1
  emit(s, 'transition', from, 'closed', 'force_expired', at)
  return true
end

-- expire_pause ends a pause whose time is up (the event dated when it
-- lapsed), or raises its pause_expiring alert once it is due. Returns true
-- when it changed s.
local function expire_pause(s)
  if s.st ~= 'paused' or s.force ~= '' then return false end
  local now = clock()
  if s.pause_until > 0 and now >= s.pause_until then
    local at = s.pause_until
    fresh(s)
    s.gen = s.gen + 1
    emit(s, 'transition', 'paused', 'closed', 'pause_expired', at)
    return true
  end
  if s.pause_warn > 0 and now >= s.pause_warn then
    s.pause_warn = 0
    emit(s, 'pause_expiring', 'paused', 'paused', 'pause_expiring', now)
    return true
  end
  return false
end

-- MAX_LAPSES is how many probe leases in a row one worker may let lapse
-- before it is refused probes (probe.MaxLapses).
local MAX_LAPSES = 3

-- open_period is the open period, ms, after level failed probes: the
-- schedule's step (base doubled level times, capped at cap) or the
-- Retry-After if longer, jittered by floor(d * jitter)
-- (probe.Schedule.OpenPeriod).
local function open_period(base, cap, jitter, level, retry_after)
  local cd = base
  local i = 0
  while i < level and cd < cap do
    cd = cd * 2
    i = i + 1
  end
  cd = math.max(math.min(cd, cap), retry_after)
  return cd + math.floor(cd * jitter)
end

-- BACKOFF_KEPT is how many of its last open periods a breaker a probe
-- closed keeps its backoff level for (probe.BackoffKept).
local BACKOFF_KEPT = 2

-- trip_level is the level a trip opens s at: one above the level it kept
-- while backoff_until is ahead, and true (flapping); else 0
-- (probe.TripLevel).
local function trip_level(s)
  if clock() < s.backoff_until then return s.level + 1, true end
  return 0, false
end

-- quorum judges a run that reached its limit by the n distinct workers
-- behind it (quorum.Rule.Reached; quorum.Rule.Quorate is n >= min_workers):
-- 'trip' from at least min_workers, 'suspect' when one worker is behind
-- it all, nil otherwise. Every run (failures, counted 429s, a window's
-- failures, slow calls, pause votes) is judged by it over its own workers.
local function quorum(n, min_workers)
  if n >= min_workers then return 'trip' end
  if n == 1 then return 'suspect' end
  return nil
end

-- snapshot is the flat reply every script ends with (breaker.View; store
-- decodes it in reply.go). A breaker with nothing to store answers an
-- empty array: closed, generation 0, and no clock read.
local function snapshot(s)
  if holds_nothing(s) then return {} end
  local now = clock()
  local in_flight = 0
  if s.st == 'half_open' and s.lease ~= '' and s.lease_until > now then in_flight = 1 end
  return { public(s), s.gen, s.fails, workers(s), s.rl, s.opened, s.probe_at, s.cd, s.cause,
    s.last, in_flight, s.level, s.force_by, s.force_reason, s.force_until, s.suspect,
    s.suspect_until, now, s.pause_until, s.slow, s.shadow, s.capped, s.lease_until, s.noprobe, s.noprobe_until }
end

-- WINDOW_BUCKETS is how many buckets a window is kept in
-- (breaker.WindowBuckets).
local WINDOW_BUCKETS = 6

-- win_load returns the window of generation gen as it stands at bucket
-- cur (breaker.Window.live): calls and fails per bucket and each failing
-- worker's last bucket, without what fell out of the window; empty when
-- the stored window belongs to another generation.
local function win_load(gen, cur)
  local w = { calls = {}, fails = {}, workers = {}, slow = {}, sworkers = {} }
  local raw = redis.call('HGETALL', K_WIN)
  local f = {}
  for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
  if tonumber(f.gen) ~= gen then return w end
  local first = cur - WINDOW_BUCKETS + 1
  for k, v in pairs(f) do
    local n = tonumber(v)
    if n ~= nil and k ~= 'gen' then
      local p2 = string.sub(k, 1, 2)
      if p2 == 'w:' then
        if n >= first then w.workers[string.sub(k, 3)] = n end
      elseif p2 == 'v:' then
        if n >= first then w.sworkers[string.sub(k, 3)] = n end
      else
        local b = tonumber(string.sub(k, 2))
        if b ~= nil and b >= first then
          local p1 = string.sub(k, 1, 1)
          if p1 == 'c' then w.calls[b] = n elseif p1 == 'f' then w.fails[b] = n elseif p1 == 's' then w.slow[b] = n end
        end
      end
    end
  end
  return w
end

-- win_totals returns a window's calls, failures, distinct failing workers
-- (a sorted list), slow calls and distinct slow workers (sorted).
local function win_totals(w)
  local calls, fails, workers, slow, sworkers = 0, 0, {}, 0, {}
  for _, n in pairs(w.calls) do calls = calls + n end
  for _, n in pairs(w.fails) do fails = fails + n end
  for _, n in pairs(w.slow) do slow = slow + n end
  for k in pairs(w.workers) do workers[#workers + 1] = k end
  for k in pairs(w.sworkers) do sworkers[#sworkers + 1] = k end
  table.sort(workers)
  table.sort(sworkers)
  return calls, fails, workers, slow, sworkers
end

-- win_bucket is the bucket holding the current time for a window of
-- window_ms (breaker.bucketOf).
local function win_bucket(window_ms)
  return math.floor(clock() / math.max(1, math.floor(window_ms / WINDOW_BUCKETS)))
end
