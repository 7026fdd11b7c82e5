-- allow.lua: may a call to the breaker's dependency go out now?
-- Runs with lib.lua (KEYS and ARGV[1..7] as documented there); its head,
-- up to the ==== line, runs before lib.lua's functions (scripts.go).
-- The rule: breaker.step.allow in internal/breaker/breaker.go.
--
-- ARGV[8] -> lease token to hand out if this call becomes the probe
-- ARGV[9] -> probe timeout, ms (the lease's lifetime)
-- ARGV[10] -> cooldown base, ms (how long a worker that let 3 leases lapse
--             is refused probes, jittered)
-- ARGV[11] -> jitter: the policy's fraction times one uniform draw in [0, 1)
-- ARGV[12] -> the policy's shadow field: 1 shadows the breaker unless an
--             operator's setting (field shadow) says otherwise
--             (breaker/shadow.go)
-- ARGV[13] -> the parent scope's verdict (breaker.Parent; internal/breaker/
--             parent.go): 0 none (no parent, or it lets calls through,
--             or this caller holds its probe lease); 3 open, 4 probe in
--             flight, 5 forced open, 7 paused: the parent denies
-- ARGV[14] -> when the parent's denial ends, ms since the epoch (0: only
--             an operator ends it)
--
-- Returns {decision, retry_after_ms, lease_token, snapshot, shadow_decision, parent_due, repeat}
--   decision: 1 allowed, 2 probe, 3 denied_open, 4 denied_probe_in_flight,
--             5 denied_forced_open, 6 denied_suspect_worker (ARGV[7] is
--             the worker record.lua suspects, or refused probes after
--             letting 3 leases lapse), 7 denied_paused, 8 denied_parent_open
--             (the parent denies until ARGV[14]: the child's own state is
--             not touched)
--   shadow_decision: 0 unless the breaker is shadowed; then the decision
--             enforced mode would have answered (the codes above), while
--             decision is 1 and retry_after_ms 0. A shadow probe (2) keeps
--             its lease token: its Record settles the probe. A parent's
--             denial (8) is the parent's, enforced: never shadowed.
--   parent_due: 1 with decision 8 when the parent's denial has ended by
--             this script's clock: the daemon asks the parent's script
--             (its probe may be due) and this one again; else 0
--   repeat:   1 when this call had already taken the lease: ARGV[8] holds
--             it for ARGV[7] (the same Allow sent again after its reply
--             was lost: breaker.Result.Repeat); it answers PROBE again
--             and writes nothing. Else 0
-- Writes nothing unless the call moves the breaker (open -> half_open, a
-- new lease, a lapsed force): a worker asking about a closed breaker never
-- creates state.

local TOKEN = ARGV[8]
local PROBE_TIMEOUT = tonumber(ARGV[9])
local COOLDOWN_BASE = tonumber(ARGV[10])
local JITTER = tonumber(ARGV[11])
POLICY_SHADOW = ARGV[12] == '1'
local PARENT = tonumber(ARGV[13]) or 0
local PARENT_UNTIL = tonumber(ARGV[14]) or 0
-- PARENT_DENIES: the parent's verdict is a denial (ARGV[13]).
local PARENT_DENIES = PARENT == 3 or PARENT == 4 or PARENT == 5 or PARENT == 7

-- The common healthy call, answered before lib.lua's functions are built:
-- a breaker that holds no state is closed at generation 0, so unless its
-- parent denies, the rules below allow it and write nothing (shadowed by
-- the policy alone: no operator's setting is stored).
if #RAW == 0 and not PARENT_DENIES then
  local shadow = 0
  if POLICY_SHADOW then shadow = 1 end
  return { 1, 0, '', {}, shadow, 0, 0 }
end

-- ==== lib.lua's functions (scripts.go)

local s = load()
local dirty = expire_force(s)
if expire_pause(s) then dirty = true end

local function reply(code, retry_after, token, parent_due, again)
  if dirty then save(s) end
  local shadow = 0
  if shadowing(s) and code ~= 8 then
    -- Shadow mode (breaker.step.shadowAllow): computed, not enforced. A
    -- parent's denial is the parent's word, enforced (breaker/parent.go).
    shadow, code, retry_after = code, 1, 0
  end
  return { code, retry_after, token or '', snapshot(s), shadow, parent_due or 0, again or 0 }
end

if s.force == 'open' then
  local retry = 0
  if s.force_until > 0 then retry = s.force_until - clock() end
  return reply(5, retry)
end
if s.force == 'closed' then
  return reply(1, 0)
end
-- The parent's verdict comes before the child's own state
-- (breaker.step.parentDenies).
if PARENT_DENIES then
  if PARENT_UNTIL == 0 then return reply(8, 0) end
  if clock() < PARENT_UNTIL then return reply(8, PARENT_UNTIL - clock()) end
  return reply(8, 0, nil, 1)
end
if s.st == 'paused' then
  return reply(7, 0)
end
if s.st == 'closed' and s.suspect ~= '' and s.suspect == ACTOR and clock() < s.suspect_until then
  return reply(6, s.suspect_until - clock())
end
if s.st == 'closed' then
  return reply(1, 0)
end

if s.st == 'open' then
  if clock() < s.probe_at then
    return reply(3, s.probe_at - clock())
  end
  s.st = 'half_open'
  s.gen = s.gen + 1
  dirty = true
  emit(s, 'transition', 'open', 'half_open', 'cooldown_elapsed', clock())
elseif s.lease ~= '' and s.lease_until > clock() then
  if s.lease == TOKEN and s.lease_by == ACTOR then
    return reply(2, 0, s.lease, nil, 1) -- this very call took it already
  end
  return reply(4, s.lease_until - clock())
elseif clock() < s.probe_at then
  -- The last probe was told to wait (a 429 within its deadline).
  return reply(3, s.probe_at - clock())
end

-- A lease that lapsed unsettled counts against its holder (breaker.lapsed).
if s.lease ~= '' then
  if s.lapser == s.lease_by then
    s.lapses = s.lapses + 1
  else
    s.lapser, s.lapses = s.lease_by, 1
  end
  s.lease, s.lease_until, s.lease_by = '', 0, ''
  dirty = true
  if s.lapses >= MAX_LAPSES then
    s.noprobe = s.lapser
    s.noprobe_until = clock() + open_period(COOLDOWN_BASE, COOLDOWN_BASE, JITTER, 0, 0)
    s.lapses = 0
    emit(s, 'probe_abandoned', 'half_open', 'half_open', 'probe_abandoned', clock(), nil, s.lapser)
  end
end
if s.noprobe ~= '' and s.noprobe == ACTOR and clock() < s.noprobe_until then
  return reply(6, s.noprobe_until - clock())
end

-- Half-open with no live lease: this caller becomes the fleet's one probe.
s.lease, s.lease_until, s.lease_by = TOKEN, clock() + PROBE_TIMEOUT, ACTOR
dirty = true
return reply(2, 0, s.lease)
