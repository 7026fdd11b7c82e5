// Package breaker states the rules of a breakerd breaker once, as a pure
// state machine: no Redis, no clock of its own (time is an input, in ms
// since the Unix epoch), no goroutines. It composes the trip rule
// (internal/quorum) and the half-open rules (internal/probe).
//
// Read it as the spec. The Lua scripts in internal/store/scripts are the
// executor on Redis, one atomic script per decision; the differential test
// (internal/store, TestDifferential) runs random sequences of calls on the
// scripts and on this machine and requires the same decisions, counted
// flags, stored states, generations and events. pkg/client's fallback and
// any other in-memory breaker run this machine (Table).
//
// The read side has one rule too: View.Verdict (verdict.go) says, from a
// snapshot and on the fleet's clock, what the next Allow would answer a
// worker (or any worker but the suspect), until when, and why, without
// moving the breaker; a property test holds it to Apply. Every reader
// (the API's states, pkg/client's fast view and local cache, the parent
// scopes of internal/scope) asks it rather than reading a state itself.
//
// The package uses only the standard library, the rule packages and the
// generated stubs, so pkg/client may import it.
package breaker

import (
	"github.com/breakerd/breakerd/internal/probe"
	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Params are a policy as one call's script receives it: every duration in
// ms, the jitter already drawn.
type Params struct {
	// Rule is the trip rule: threshold, min_workers, rate_limit_trips.
	Rule quorum.Rule
	// CooldownBase and CooldownCap bound the open period, ms (probe.Cooldown).
	CooldownBase, CooldownCap int64
	// ProbeTimeout is a probe lease's lifetime, ms.
	ProbeTimeout int64
	// Retention is how long a stored verdict outlives its last write, ms.
	Retention int64
	// Jitter is the policy's jitter fraction times one uniform draw in
	// [0, 1): every open period this call starts is probe.Jitter(d, Jitter).
	Jitter float64
	// PauseTTL is how long a pause lasts unless an operator ends it
	// first, ms; its pause_expiring alert is due PauseTTL/4 before.
	PauseTTL int64

	// WindowMs is the failure-rate window, ms: 0 for consecutive mode,
	// else window mode (window.go), in WindowBuckets buckets.
	WindowMs int64
	// FailureRate is the failure rate, in (0, 1], at or above which a
	// window trips (window mode).
	FailureRate float64
	// MinCalls is how many calls a window must hold before its rate
	// counts (window mode); at least 2.
	MinCalls int64

	// SlowCallMs is the slow-call limit, ms: a success that took longer
	// is slow (slow.go); 0 turns slow calls off.
	SlowCallMs int64
	// SlowCallThreshold is how many consecutive slow calls trip
	// (consecutive mode; 0: never).
	SlowCallThreshold int64
	// SlowCallRate is the share of a window's calls, in (0, 1], that must
	// be slow for it to trip (window mode; 0: never).
	SlowCallRate float64

	// MaxOpenPPM is the breaker's group's max_open_fraction in millionths
	// (cap.go): 0 when the breaker is in no group (no cap).
	MaxOpenPPM int64
	// GroupMembers is how many members the breaker's group declares (the
	// cap's denominator, cap.go); 0 when the breaker is in no group.
	GroupMembers int64

	// Shadow is the policy's shadow mode (shadow.go): decisions computed,
	// transitions recorded, Allow always allows. An operator's setting
	// (State.Shadow) overrides it either way.
	Shadow bool
}

// MaxLapses is probe.MaxLapses, the lease rule's limit, which the
// machine applies (step.lapsed) and the reasons cite.
const MaxLapses = probe.MaxLapses

// Op is the kind of call.
type Op int

// The calls a breaker answers.
const (
	OpAllow Op = iota + 1
	OpRecord
	OpForce
	// OpRecover is a daemon's recovery check that succeeded (a cheap
	// request to the vendor's status endpoint, never a real call): Actor
	// is the daemon, Ticket.Gen the generation it saw the breaker open at.
	OpRecover
)

// Ticket fences a Record: the generation (and, for a probe, the lease
// token) the call was admitted with.
type Ticket struct {
	Gen   int64
	Lease string
	// Shadow: the Allow was a shadow denial (shadow.go): enforced mode
	// would not have made the call, so its Record counts nothing.
	Shadow bool
}

// Call is one call on a breaker.
type Call struct {
	Op Op
	// Actor is the worker id (Allow, Record) or the operator (Force).
	Actor string

	// Token is the lease token an Allow hands out if it becomes the probe.
	// Each Allow proposes a token of its own (the daemon makes it), so
	// only the same call sent again presents the token holding the lease:
	// it is answered PROBE again (Result.Repeat), never denied for its own
	// lease.
	Token string

	// Evidence is what a Record's outcome says (quorum.EvidenceOf).
	Evidence quorum.Evidence
	// Ticket is the Record's fence.
	Ticket Ticket
	// RetryAfter is the outcome's Retry-After, ms, already capped at the
	// policy's cooldown cap (0 when none).
	RetryAfter int64
	// Last is the failure in plain words (Describe).
	Last string
	// Latency is how long the call took, ms, as its worker measured it
	// (slow calls, slow.go).
	Latency int64
	// Trace is a Record's W3C trace id ("" for none): the transition into
	// open it causes carries it (Event.Trace).
	Trace string
	// CredentialWorked: with a 401 (quorum.CredentialRejected), the worker
	// had seen this credential work, so the 401 pauses the breaker.
	CredentialWorked bool
	// Group is the breaker's group's index as the Record saw it (the
	// other members open; cap.go). Unused without a group.
	Group GroupCounts
	// Quiet marks the alerts a Record raises when its caller is past its
	// alert quota (server quotas): "" sends them to hooks as usual; any
	// other mark is stored with the first alert, and "quiet" with every
	// later one (Event.Quiet).
	Quiet string

	// Mode is a Force's mode: "open", "closed", "auto" or "shadow".
	Mode string
	// Shadow is the setting a Force with Mode "shadow" stores: "on",
	// "off", or "" (follow the policy).
	Shadow string
	// Reason is the operator's reason for a Force.
	Reason string
	// TTL is a pin's lifetime, ms (0: until AUTO).
	TTL int64

	// Parent is an Allow's parent verdict (parent.go); the zero value for
	// a breaker without a parent.
	Parent Parent
}

// Note says why a Record did or did not count. The scripts return the
// code; Go renders it (Note.String).
type Note string

// The notes.
const (
	NoteNone             Note = ""
	NotePaused           Note = "paused"            // paused: nothing counts
	NoteCredentialPaused Note = "credential_paused" // this 401 paused the breaker
	NoteOpen             Note = "open"              // an open circuit counts nothing
	NoteOpenExtended     Note = "open_extended"     // a Retry-After moved the next probe later
	NoteForcedOpen       Note = "forced_open"       // pinned open: nothing counts
	NoteNotLeaseHolder   Note = "not_lease_holder"  // half-open: only the probe decides
	NoteProbeReleased    Note = "probe_released"    // the probe's outcome never counts: lease freed
	NoteProbeThrottled   Note = "probe_throttled"   // the probe got a 429 it could wait out
	NoteStale            Note = "stale"             // the ticket's generation is not the state's: older, or newer (state lost)
	NoteThrottled        Note = "throttled"         // a 429 within the deadline
	NoteNeutral          Note = "neutral"           // the outcome never counts
	NoteCredentialLone   Note = "credential_lone"   // a 401 no other worker confirms
	NoteQuotaPaused      Note = "quota_paused"      // this 402 paused the breaker
	NoteQuotaLone        Note = "quota_lone"        // a 402 no other worker confirms
	NoteRecovered        Note = "recovered"         // a recovery check half-opened the breaker
	NoteRecoveryStale    Note = "recovery_stale"    // a recovery check found the breaker no longer open at its generation
	NoteShadowDenied     Note = "shadow_denied"     // shadow mode: enforced mode would have denied the call
)

// Result is what a call answers.
type Result struct {
	// Decision answers an Allow; RetryAfter (ms) goes with a denial.
	Decision   pb.Decision
	RetryAfter int64
	// ShadowDecision is, in shadow mode, what enforced mode would have
	// answered the Allow (Decision is then ALLOWED); UNSPECIFIED when the
	// breaker is enforced.
	ShadowDecision pb.Decision
	// Counted and Note answer a Record.
	Counted bool
	Note    Note
	// Wrote says the call changed the stored state (the script saved it,
	// and reset its TTL).
	Wrote bool
	// Windowed says the call wrote the failure-rate window (window mode;
	// the script rewrote brk:{name}:win and reset its TTL to one window).
	Windowed bool
	// Notice is a Record's run notice, NoticeNone when it has none: the
	// scripts PUBLISH it on the events channel (live only, never in the
	// durable log) so that fast-mode clients learn within milliseconds
	// whether a success on the breaker would change anything (RunOpen).
	Notice Notice
	// ParentDue answers an Allow denied DENIED_PARENT_OPEN because the
	// parent's denial has ended by the fleet's clock: the parent must be
	// asked (its probe may be due) and the child asked again (parent.go).
	ParentDue bool
	// Repeat says the Allow was one already applied, sent again: its own
	// token holds the live lease (a reply lost on its way back and the
	// command resent). It answers PROBE as the first did, and writes
	// nothing.
	Repeat bool
}

// Notice is a non-durable notice a Record publishes: pub/sub only, never
// appended to the breaker's event stream.
type Notice string

// The notices.
const (
	NoticeNone Notice = ""
	// NoticeRunStarted: a closed breaker's failure run started (RunOpen
	// went false to true with no transition): a success there now resets
	// something, so fast clients must send their successes.
	NoticeRunStarted Notice = "run_started"
	// NoticeRunEnded: a success ended a closed breaker's failure run (RunOpen
	// went true to false with no transition): a success there changes
	// nothing again.
	NoticeRunEnded Notice = "run_ended"
)

// RunOpen reports whether a success on s would change it: a closed
// breaker (automatic or pinned closed) with a failure run in progress, a
// run of 429s, a slow run (slow.go), or a suspect worker. (A closed breaker with pause votes
// always has a suspect, and worker sets are empty without failures.)
func (s State) RunOpen() bool {
	return s.phase() == Closed && (s.Fails > 0 || s.RL > 0 || s.Slow > 0 || s.Suspect != "")
}

// runNotice is the notice a Record that moved before to after publishes:
// one only when the breaker stayed closed at the same generation (a
// transition is an event of its own) and RunOpen changed.
func runNotice(before, after State) Notice {
	if before.Gen != after.Gen || before.phase() != Closed || after.phase() != Closed {
		return NoticeNone
	}
	switch was, is := before.RunOpen(), after.RunOpen(); {
	case !was && is:
		return NoticeRunStarted
	case was && !is:
		return NoticeRunEnded
	}
	return NoticeNone
}

// Event is a transition or an alert, as the scripts append it to the
// breaker's event stream. From and To are public state names.
type Event struct {
	Kind     string // transition, forced, credential_revoked, quota_exhausted, stuck_open, suspect_worker, pause_expiring, probe_abandoned, open_fraction_cap, flapping
	From, To string
	Cause    Cause
	Gen      int64
	Fails    int64
	Workers  int64
	RL       int64
	Cooldown int64 // ms
	At       int64 // ms since the epoch
	Actor    string
	Last     string
	Note     string // the operator's reason (forced); the cause and counts (open_fraction_cap, CapNote)
	// Shadow: the breaker was shadowing when the event was emitted (its
	// state after the call is not enforced): "would have opened".
	Shadow bool
	// Quiet is an alert's mark past its caller's alert quota (Call.Quiet):
	// "" for an alert sent to hooks, and for every transition and Force.
	Quiet string
	// Trace is, on a transition into open a Record caused, that call's
	// trace id (Call.Trace): the last counted failure's.
	Trace string
}

// Alert reports whether an event of kind is an alert (not a transition
// or an operator's Force): what the alert quota counts.
func Alert(kind string) bool { return kind != "transition" && kind != "forced" }

// QuietMark is the mark of an alert past its caller's quota that is not
// the one a summary rides on (Call.Quiet).
const QuietMark = "quiet"

// step is one call in progress.
type step struct {
	p      Params
	s      State
	c      Call
	now    int64
	res    Result
	events []Event
}

// Apply runs one call on state s at now (ms) and returns the new state,
// the answer and the events to emit, in order. It never modifies s.
func Apply(p Params, s State, c Call, now int64) (State, Result, []Event) {
	st := &step{p: p, s: s.clone(), c: c, now: now}
	st.res.Wrote = st.expireForce()
	if st.expirePause() {
		st.res.Wrote = true
	}
	switch c.Op {
	case OpAllow:
		st.allow()
		st.shadowAllow()
	case OpRecord:
		before := st.s
		st.record()
		st.res.Notice = runNotice(before, st.s)
	case OpForce:
		st.force()
	case OpRecover:
		st.recover()
	}
	return st.s, st.res, st.events
}

func (st *step) emit(kind string, from, to string, cause Cause, at int64) {
	s := &st.s
	e := Event{Kind: kind, From: from, To: to, Cause: cause, Gen: s.Gen,
		Fails: s.Fails, Workers: int64(len(s.Workers)), RL: s.RL, Cooldown: s.Cooldown, At: at,
		Actor: st.c.Actor, Last: s.Last, Shadow: st.shadowing()}
	if Alert(kind) && st.c.Quiet != "" {
		e.Quiet, st.c.Quiet = st.c.Quiet, QuietMark
	}
	st.events = append(st.events, e)
}

// expireForce ends a pin whose TTL has run out, as AUTO would: closed with
// fresh counts, the event dated when the pin lapsed.
func (st *step) expireForce() bool {
	s := &st.s
	if s.Force == "" || s.ForceUntil == 0 || st.now < s.ForceUntil {
		return false
	}
	from, at := s.Public(), s.ForceUntil
	s.fresh(true)
	s.Gen++
	st.emit("transition", from, "closed", CauseForceExpired, at)
	return true
}

// expirePause ends a pause whose time is up (the event dated when it
// lapsed), or raises its pause_expiring alert once it is due.
func (st *step) expirePause() bool {
	s := &st.s
	if s.phase() != Paused || s.Force != "" {
		return false
	}
	switch {
	case s.PauseUntil > 0 && st.now >= s.PauseUntil:
		at := s.PauseUntil
		s.fresh(false)
		s.Gen++
		st.emit("transition", "paused", "closed", CausePauseExpired, at)
		return true
	case s.PauseWarn > 0 && st.now >= s.PauseWarn:
		s.PauseWarn = 0
		st.emit("pause_expiring", "paused", "paused", CausePauseExpiring, st.now)
		return true
	}
	return false
}

// cooldown is the open period after level failed probes
// (probe.Schedule.OpenPeriod under this call's policy).
func (st *step) cooldown(level, retryAfter int64) int64 {
	return probe.Schedule{Base: st.p.CooldownBase, Cap: st.p.CooldownCap, Jitter: st.p.Jitter}.OpenPeriod(level, retryAfter)
}

func (st *step) allow() {
	s, now := &st.s, st.now
	deny := func(d pb.Decision, retry int64) { st.res.Decision, st.res.RetryAfter = d, retry }
	switch {
	case s.Force == "open":
		var retry int64
		if s.ForceUntil > 0 {
			retry = s.ForceUntil - now
		}
		deny(pb.Decision_DECISION_DENIED_FORCED_OPEN, retry)
		return
	case s.Force == "closed":
		st.res.Decision = pb.Decision_DECISION_ALLOWED
		return
	case st.parentDenies(): // parent.go: the parent's verdict, before the child's own
		return
	case s.phase() == Paused:
		deny(pb.Decision_DECISION_DENIED_PAUSED, 0)
		return
	case s.phase() == Closed && s.Suspect != "" && s.Suspect == st.c.Actor && now < s.SuspectUntil:
		deny(pb.Decision_DECISION_DENIED_SUSPECT_WORKER, s.SuspectUntil-now)
		return
	case s.phase() == Closed:
		st.res.Decision = pb.Decision_DECISION_ALLOWED
		return
	}
	if s.phase() == Open {
		if now < s.ProbeAt {
			deny(pb.Decision_DECISION_DENIED_OPEN, s.ProbeAt-now)
			return
		}
		s.Phase = HalfOpen
		s.Gen++
		st.res.Wrote = true
		st.emit("transition", "open", "half_open", CauseCooldownElapsed, now)
	} else if probe.LeaseLive(s.Lease, s.LeaseUntil, now) {
		if s.Lease == st.c.Token && s.LeaseBy == st.c.Actor {
			// This very call took the lease already (Call.Token).
			st.res.Decision, st.res.Repeat = pb.Decision_DECISION_PROBE, true
			return
		}
		deny(pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, s.LeaseUntil-now)
		return
	} else if now < s.ProbeAt {
		// The last probe was told to wait (a 429 within its deadline):
		// no probe before the vendor's Retry-After.
		deny(pb.Decision_DECISION_DENIED_OPEN, s.ProbeAt-now)
		return
	}
	if s.Lease != "" {
		st.lapsed()
	}
	if s.NoProbe != "" && s.NoProbe == st.c.Actor && now < s.NoProbeUntil {
		deny(pb.Decision_DECISION_DENIED_SUSPECT_WORKER, s.NoProbeUntil-now)
		return
	}
	// Half-open with no live lease: this caller is the fleet's one probe.
	s.Lease, s.LeaseUntil, s.LeaseBy = st.c.Token, now+st.p.ProbeTimeout, st.c.Actor
	st.res.Wrote = true
	st.res.Decision = pb.Decision_DECISION_PROBE
}

// lapsed counts a lease that lapsed unsettled against its holder: the
// MaxLapses-th in a row from one worker raises probe_abandoned and
// refuses that worker probes for one base cooldown.
func (st *step) lapsed() {
	s := &st.s
	if s.Lapser == s.LeaseBy {
		s.Lapses++
	} else {
		s.Lapser, s.Lapses = s.LeaseBy, 1
	}
	s.Lease, s.LeaseUntil, s.LeaseBy = "", 0, ""
	st.res.Wrote = true
	if s.Lapses >= MaxLapses {
		s.NoProbe, s.NoProbeUntil = s.Lapser, st.now+st.cooldown(0, 0)
		s.Lapses = 0
		st.emit("probe_abandoned", "half_open", "half_open", CauseProbeAbandoned, st.now)
		st.events[len(st.events)-1].Actor = s.Lapser
	}
}

func (st *step) record() {
	if st.recordGated() {
		return
	}
	// Closed (automatic, or pinned closed: counted, never tripped).
	if st.c.Ticket.Gen != st.s.Gen {
		st.res.Counted, st.res.Note = false, NoteStale
		return
	}
	if st.p.WindowMs > 0 {
		st.windowRecord()
		return
	}
	if st.slow() {
		st.slowRecord()
		return
	}
	if !st.closedOutcome() {
		st.countFailure()
	}
}

// recordGated answers a Record that the breaker's state decides before
// any run is counted: a shadow-denied call, a pause, a 401 or 402 that
// pauses or isolates, an open circuit, a pin open, a half-open probe's
// outcome. It reports whether the Record is answered.
func (st *step) recordGated() bool {
	s, c, now := &st.s, st.c, st.now
	ev := c.Evidence
	note := func(counted bool, n Note) { st.res.Counted, st.res.Note = counted, n }
	switch {
	case c.Ticket.Shadow:
		note(false, NoteShadowDenied)
		return true
	case s.Force == "" && s.phase() == Paused:
		note(false, NotePaused)
		return true
	}
	if ev == quorum.CredentialRejected || ev == quorum.QuotaExhausted {
		if st.pauseEvidence() {
			return true
		}
	}
	switch {
	case s.Force == "" && s.phase() == Open:
		// An open circuit counts nothing, but a 429's Retry-After may push
		// its next probe later (never earlier).
		if (ev == quorum.RateLimited || ev == quorum.Throttled) && now+c.RetryAfter > s.ProbeAt {
			s.ProbeAt = now + c.RetryAfter
			st.res.Wrote = true
			note(false, NoteOpenExtended)
			return true
		}
		note(false, NoteOpen)
	case s.Force == "open":
		note(false, NoteForcedOpen)
	case s.Force == "" && s.phase() == HalfOpen:
		st.probeOutcome()
	default:
		return false
	}
	return true
}

// closedOutcome applies an outcome that does not extend a closed
// breaker's failure run (a success ends its runs; a 429 within the
// deadline ends its run of 429s; the rest never count): it reports
// whether it answered the Record.
func (st *step) closedOutcome() bool {
	s, ev := &st.s, st.c.Evidence
	switch {
	case ev == quorum.Healthy:
		if s.Fails > 0 || s.RL > 0 || len(s.Workers) > 0 || s.Suspect != "" || len(s.Pausers) > 0 || s.Slow > 0 || s.Capped {
			s.Fails, s.RL, s.Last = 0, 0, ""
			s.Capped = false
			s.Suspect, s.SuspectUntil = "", 0
			s.Workers, s.RLWorkers, s.Pausers = nil, nil, nil
			s.Slow, s.SlowBy, s.SlowLat = 0, nil, nil
			if s.Cause == CauseSlowSuspect {
				s.Cause = ""
			}
			st.res.Wrote = true
		}
		st.res.Counted = true
	case ev == quorum.Throttled:
		if s.RL > 0 {
			s.RL, s.RLWorkers = 0, nil
			st.res.Wrote = true
		}
		st.res.Note = NoteThrottled
	case !ev.Counted():
		st.res.Note = NoteNeutral
	default:
		return false
	}
	return true
}

// countFailure extends a closed breaker's failure run with a counted
// failure and judges the run (quorum.Judge): a trip, a suspect, or
// nothing yet. A pin closed counts and never trips.
func (st *step) countFailure() {
	s, c := &st.s, st.c
	s.Fails++
	s.Last = c.Last
	if c.Evidence == quorum.RateLimited {
		s.RL++
		s.RLWorkers = addMember(s.RLWorkers, c.Actor, st.p.Rule.Keep())
	} else {
		s.RL, s.RLWorkers = 0, nil
	}
	s.Workers = addMember(s.Workers, c.Actor, st.p.Rule.Keep())
	st.res.Wrote, st.res.Counted = true, true
	if s.Force == "closed" {
		return
	}
	run := quorum.Run{Failures: s.Fails, Workers: int64(len(s.Workers)),
		RateLimited: s.RL, RateLimitWorkers: int64(len(s.RLWorkers))}
	switch quorum.Judge(run, st.p.Rule) {
	case quorum.TripRateLimit:
		if !st.capTrip(CauseRateLimit) {
			st.trip(CauseRateLimit)
		}
	case quorum.TripCount:
		if !st.capTrip(CauseTrip) {
			st.trip(CauseTrip)
		}
	case quorum.Suspect:
		if s.Cause == CauseSlowSuspect { // the failure run's suspect now
			s.Cause = ""
		}
		st.suspect(CauseSuspect)
	}
}

// suspect denies the caller, the one worker behind a run past its limit,
// for a trip cooldown from now, and raises suspect_worker (cause) once per
// worker: a run whose failures, slow calls or window failures all came
// from one worker isolates that worker, never the fleet (quorum.Suspect).
func (st *step) suspect(cause Cause) {
	s := &st.s
	s.SuspectUntil = st.now + st.cooldown(0, 0)
	if s.Suspect != st.c.Actor {
		s.Suspect = st.c.Actor
		st.emit("suspect_worker", "closed", "closed", cause, st.now)
	}
}

// pauseEvidence applies a rejected credential (401) or an exhausted quota
// (402): an alert, and a vote to pause from a current ticket with no pin
// (for a 401, only from a worker that had seen the credential work). It
// reports whether the Record is answered (a pause, or a lone vote on a
// closed breaker); otherwise the outcome goes on as one that never counts.
func (st *step) pauseEvidence() bool {
	s, c, now := &st.s, st.c, st.now
	kind, pause, alert, lone := "credential_revoked", CauseCredential, CauseCredentialAlert, CauseCredentialLone
	paused, isolated, vote := NoteCredentialPaused, NoteCredentialLone, c.CredentialWorked
	if c.Evidence == quorum.QuotaExhausted {
		kind, pause, alert, lone = "quota_exhausted", CauseQuota, CauseQuotaAlert, CauseQuotaLone
		paused, isolated, vote = NoteQuotaPaused, NoteQuotaLone, true
	}
	current := c.Ticket.Gen == s.Gen && (s.phase() == Closed ||
		(s.phase() == HalfOpen && c.Ticket.Lease != "" && c.Ticket.Lease == s.Lease))
	if !vote || s.Force != "" || !current {
		st.emit(kind, s.Public(), s.Public(), alert, now)
		return false
	}
	from := s.Public()
	if st.pauseVote(pause) {
		st.emit(kind, from, "paused", pause, now)
		st.res.Note = paused
		return true
	}
	st.emit(kind, s.Public(), s.Public(), lone, now)
	if s.phase() == Closed {
		st.res.Note = isolated
		return true
	}
	return false
}

// pauseVote counts the actor's rejected working credential (or exhausted
// quota) toward a pause: with min_workers distinct workers behind it, the
// breaker pauses (true) for PauseTTL; a lone worker is isolated as a
// suspect while the fleet keeps the breaker.
func (st *step) pauseVote(cause Cause) bool {
	s, now := &st.s, st.now
	s.Pausers = addMember(s.Pausers, st.c.Actor, st.p.Rule.Keep())
	st.res.Wrote = true
	if st.p.Rule.Quorate(int64(len(s.Pausers))) {
		s.fresh(false)
		s.Phase, s.Cause = Paused, cause
		s.PauseUntil = now + st.p.PauseTTL
		s.PauseWarn = s.PauseUntil - st.p.PauseTTL/4
		s.Gen++
		return true
	}
	if s.phase() == Closed {
		s.Suspect, s.SuspectUntil = st.c.Actor, now+st.cooldown(0, 0)
	}
	return false
}

// probeOutcome applies a Record to a half-open breaker: only the lease
// holder's outcome decides.
func (st *step) probeOutcome() {
	s, c, now := &st.s, st.c, st.now
	if !probe.Holds(c.Ticket.Lease, c.Ticket.Gen, s.Lease, s.Gen) {
		st.res.Note = NoteNotLeaseHolder
		return
	}
	st.res.Wrote = true
	if s.Lapser == s.LeaseBy { // the holder settled: its run of lapses ends
		s.Lapser, s.Lapses = "", 0
	}
	switch ev := c.Evidence; {
	case ev == quorum.Healthy && !st.slow():
		level, until := s.Level, probe.KeptUntil(now, s.Cooldown)
		s.fresh(false)
		s.Level, s.BackoffUntil = level, until // one good probe is no proof of health
		s.Gen++
		st.emit("transition", "half_open", "closed", CauseProbeSucceeded, now)
		st.res.Counted = true
	case ev.Counted() || ev == quorum.Healthy: // a failure, or a slow success
		s.Last = c.Last
		st.open("half_open", s.Level+1, st.cooldown(s.Level+1, c.RetryAfter), CauseProbeFailed)
		if s.Level == 2 {
			st.emit("stuck_open", "open", "open", CauseStuckOpen, now)
		}
		st.res.Counted = true
	case ev == quorum.Throttled:
		// No verdict: the vendor asked for a wait the caller could afford.
		// The lease is freed, and no probe goes out before the Retry-After.
		s.Lease, s.LeaseUntil, s.LeaseBy = "", 0, ""
		s.ProbeAt = now + c.RetryAfter
		st.res.Note = NoteProbeThrottled
	default:
		s.Lease, s.LeaseUntil, s.LeaseBy = "", 0, ""
		st.res.Note = NoteProbeReleased
	}
}

// trip opens a closed breaker (cause: what tripped it): at the base
// cooldown, or one level above the backoff it kept since a probe closed
// it (probe.TripLevel), which raises flapping.
func (st *step) trip(cause Cause) {
	s := &st.s
	level, kept := probe.TripLevel(s.Level, s.BackoffUntil, st.now)
	st.open("closed", level, st.cooldown(level, st.c.RetryAfter), cause)
	if kept {
		st.emit("flapping", "open", "open", CauseFlapping, st.now)
	}
}

// open moves s to open for cd ms.
func (st *step) open(from string, level, cd int64, cause Cause) {
	s, now := &st.s, st.now
	s.Phase, s.Level, s.Cooldown, s.Cause = Open, level, cd, cause
	s.Opened, s.ProbeAt, s.BackoffUntil = now, now+cd, 0
	s.Lease, s.LeaseUntil, s.LeaseBy = "", 0, ""
	s.Suspect, s.SuspectUntil = "", 0
	s.Slow, s.SlowBy, s.SlowLat = 0, nil, nil
	s.Capped = false
	s.Gen++
	st.res.Wrote = true
	st.emit("transition", from, "open", cause, now)
	st.events[len(st.events)-1].Trace = st.c.Trace
}

func (st *step) force() {
	s, c, now := &st.s, st.c, st.now
	from := s.Public()
	cause := CauseForced
	if c.Mode == "shadow" {
		st.setShadow()
		return
	}
	if c.Mode == "auto" {
		s.fresh(true)
		cause = CauseAuto
	} else {
		// A pin ends a pause: when it lapses (or on AUTO) the breaker is fresh.
		if s.phase() == Paused {
			s.Phase, s.Cause, s.PauseUntil, s.PauseWarn = Closed, "", 0, 0
		}
		s.Force, s.ForceReason, s.ForceBy, s.ForceUntil = c.Mode, c.Reason, c.Actor, 0
		if c.TTL > 0 {
			s.ForceUntil = now + c.TTL
		}
		s.Lease, s.LeaseUntil, s.LeaseBy = "", 0, ""
	}
	s.Gen++
	st.res.Wrote = true
	st.emit("forced", from, s.Public(), cause, now)
	st.events[len(st.events)-1].Note = c.Reason
}

// recover applies a successful recovery check started when the breaker was
// open at generation c.Ticket.Gen. An automatic open breaker still at that
// generation goes half-open at once, its next probe due now, so the next
// Allow is the probe, as after a cooldown; the level (failed probes since
// the trip) and the cooldown schedule are kept, so a failed probe backs
// off as it would have. Anything else (the breaker moved since the check
// began, a pin, a pause) is left as it is: NoteRecoveryStale. A failed
// check is never a call: it changes nothing.
func (st *step) recover() {
	s, now := &st.s, st.now
	if s.Force != "" || s.phase() != Open || st.c.Ticket.Gen != s.Gen {
		st.res.Note = NoteRecoveryStale
		return
	}
	s.Phase = HalfOpen
	s.ProbeAt = now
	s.Gen++
	st.res.Wrote, st.res.Counted, st.res.Note = true, true, NoteRecovered
	st.emit("transition", "open", "half_open", CauseRecoveryCheck, now)
}
