package breaker

import (
	"slices"
	"strconv"
	"strings"
)

// Phase is the automatic state of a breaker, as the scripts store it.
type Phase string

// The phases. An operator's pin (State.Force) overrides them.
const (
	Closed   Phase = "closed"
	Open     Phase = "open"
	HalfOpen Phase = "half_open"
	// Paused: a rejected credential; only an operator's Force AUTO or
	// CLOSED ends it.
	Paused Phase = "paused"
)

// Cause says why a breaker is open or paused, or why an event happened.
// The scripts store causes, never sentences; Go renders the words once
// (reason.go).
type Cause string

// The causes.
const (
	CauseTrip            Cause = "trip"             // threshold failures from a quorum
	CauseRateLimit       Cause = "rate_limit"       // rate_limit_trips counted 429s from a quorum
	CauseProbeFailed     Cause = "probe_failed"     // the half-open probe failed
	CauseCredential      Cause = "credential"       // a 401 on a credential that had worked: paused
	CauseCredentialAlert Cause = "credential_alert" // a 401, alert only
	CauseCooldownElapsed Cause = "cooldown_elapsed" // open -> half_open
	CauseProbeSucceeded  Cause = "probe_succeeded"  // half_open -> closed
	CauseForceExpired    Cause = "force_expired"    // an operator's pin lapsed
	CauseForced          Cause = "forced"           // an operator pinned it
	CauseAuto            Cause = "auto"             // an operator returned it to automatic
	CauseStuckOpen       Cause = "stuck_open"       // two failed probes since the trip
	CauseSuspect         Cause = "suspect"          // one worker alone past the threshold
	CauseCredentialLone  Cause = "credential_lone"  // a 401 from one worker only: it is isolated
	CausePauseExpiring   Cause = "pause_expiring"   // a pause lapses soon
	CausePauseExpired    Cause = "pause_expired"    // a pause lapsed: closed again
	CauseProbeAbandoned  Cause = "probe_abandoned"  // a worker let 3 probe leases lapse in a row
	CauseQuota           Cause = "quota"            // the account's quota or billing exhausted: paused
	CauseQuotaAlert      Cause = "quota_alert"      // a 402, alert only
	CauseQuotaLone       Cause = "quota_lone"       // a 402 from one worker only: it is isolated
	CauseOutage          Cause = "outage"           // carried into a daemon's memory from the last event it heard (Last)
	CauseWindow          Cause = "window"           // window mode: the failure rate over the window, from a quorum
	CauseWindowSuspect   Cause = "window_suspect"   // window mode: the rate reached, all failures from one worker
	CauseRecoveryCheck   Cause = "recovery_check"   // open -> half_open: the policy's recovery check succeeded
	CauseSlow            Cause = "slow"             // slow_call_threshold consecutive slow calls (or slow_call_rate of a window) from a quorum
	CauseSlowSuspect     Cause = "slow_suspect"     // the slow calls past the limit all came from one worker
	CauseShadow          Cause = "shadow"           // an operator changed the breaker's shadow setting
	CauseStateLost       Cause = "state_lost"       // Redis forgot a state a daemon heard (an alert only; Note says what follows)
	CauseFlapping        Cause = "flapping"         // a trip while the backoff of the last open period is kept: it opens one level up
)

// causes is every Cause, CauseOpenFractionCap (cap.go) included: the fixed
// set an event's cause is drawn from (TestEveryCauseIsKnown holds it to
// the constants).
var causes = map[Cause]bool{
	CauseTrip: true, CauseRateLimit: true, CauseProbeFailed: true, CauseCredential: true, CauseCredentialAlert: true,
	CauseCooldownElapsed: true, CauseProbeSucceeded: true, CauseForceExpired: true, CauseForced: true, CauseAuto: true,
	CauseStuckOpen: true, CauseSuspect: true, CauseCredentialLone: true, CausePauseExpiring: true, CausePauseExpired: true,
	CauseProbeAbandoned: true, CauseQuota: true, CauseQuotaAlert: true, CauseQuotaLone: true, CauseOutage: true,
	CauseWindow: true, CauseWindowSuspect: true, CauseRecoveryCheck: true, CauseSlow: true, CauseSlowSuspect: true,
	CauseShadow: true, CauseStateLost: true, CauseOpenFractionCap: true, CauseFlapping: true,
}

// Known reports whether c is one of the causes this build decides (an
// event written by a newer daemon may carry another).
func (c Cause) Known() bool { return causes[c] }

// State is one breaker's stored state: the fields of its Redis hash
// brk:{name}:state and the members of its two worker sets. All times are
// ms since the Unix epoch on the fleet's clock (Redis TIME); durations are
// ms. The zero value is a fresh closed breaker at generation 0, which is
// also what a missing key reads as.
type State struct {
	Phase Phase // "" reads as Closed
	// Gen is the generation: +1 on every transition and Force. Tickets
	// carry it, so outcomes of calls admitted before a transition are not
	// counted after it.
	Gen int64
	// Fails counts consecutive counted failures; RL the counted 429s that
	// end the run.
	Fails, RL int64
	// Last is the last counted failure in plain words ("timeout after 30s").
	Last string
	// Opened is when the circuit last opened; ProbeAt when it admits its
	// next probe; Cooldown the open period (ProbeAt - Opened, jitter and
	// Retry-After included); Level the failed probes since the trip.
	Opened, ProbeAt, Cooldown, Level int64
	// BackoffUntil is, for a closed breaker a probe closed, until when it
	// keeps Level (probe.KeptUntil): a trip before then opens one level
	// up (probe.TripLevel). 0 when nothing is kept.
	BackoffUntil int64
	// Cause is why the circuit is open or paused.
	Cause Cause
	// Lease is the probe lease token (half-open only), live until
	// LeaseUntil.
	Lease      string
	LeaseUntil int64
	// LeaseBy is the worker holding the lease. Lapser is the last worker
	// that let a lease lapse unsettled, Lapses how many in a row; after 3,
	// NoProbe is that worker, refused probes until NoProbeUntil.
	LeaseBy, Lapser, NoProbe string
	Lapses, NoProbeUntil     int64
	// PauseUntil is when a pause lapses by itself; PauseWarn when the
	// pause_expiring alert is due (0 once raised).
	PauseUntil, PauseWarn int64
	// Force is an operator's pin, "open" or "closed", with its reason, the
	// operator, and its end (0: until AUTO).
	Force, ForceReason, ForceBy string
	ForceUntil                  int64
	// Suspect is the worker that alone failed past the threshold; Allow
	// denies it until SuspectUntil while the fleet stays closed.
	Suspect      string
	SuspectUntil int64
	// Workers are the distinct workers behind the failure run
	// (brk:{name}:workers); RLWorkers those behind its counted 429s
	// (brk:{name}:rl); Pausers those whose working credential was
	// rejected (brk:{name}:pause). All sorted.
	Workers, RLWorkers, Pausers []string

	// Slow counts the consecutive slow calls (consecutive mode; slow.go);
	// SlowBy are their distinct workers, sorted; SlowLat the latencies of
	// the last SlowSample slow calls, ms, oldest first (both modes).
	Slow    int64
	SlowBy  []string
	SlowLat []int64

	// Capped says a trip was stopped by the group's open-fraction cap
	// (cap.go) since the runs last ended: its open_fraction_cap event is
	// raised once. A fast success or any transition clears it.
	Capped bool

	// Shadow is an operator's shadow setting (shadow.go): "on", "off",
	// or "" to follow the policy (Params.Shadow). Kept by every
	// transition and by AUTO; only a Force with mode "shadow" changes it.
	Shadow string

	// Win is the failure-rate window (window mode only; the hash
	// brk:{name}:win). It counts only while Win.Gen is Gen.
	Win Window
}

// Public names the state as the API does, pins included: closed, open,
// half_open, paused, forced_open or forced_closed.
func (s *State) Public() string {
	switch s.Force {
	case "open":
		return "forced_open"
	case "closed":
		return "forced_closed"
	}
	return string(s.phase())
}

func (s *State) phase() Phase {
	if s.Phase == "" {
		return Closed
	}
	return s.Phase
}

// Fields returns the hash fields the scripts store for s: every non-zero,
// non-empty field, numbers in decimal, the phase only when not closed.
// The differential test compares it with HGETALL.
func (s *State) Fields() map[string]string {
	out := map[string]string{}
	str := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	num := func(k string, v int64) {
		if v != 0 {
			out[k] = strconv.FormatInt(v, 10)
		}
	}
	if s.phase() != Closed {
		out["st"] = string(s.Phase)
	}
	num("gen", s.Gen)
	num("fails", s.Fails)
	num("rl", s.RL)
	str("last", s.Last)
	num("opened", s.Opened)
	num("probe_at", s.ProbeAt)
	num("cd", s.Cooldown)
	num("level", s.Level)
	num("backoff_until", s.BackoffUntil)
	str("cause", string(s.Cause))
	str("lease", s.Lease)
	num("lease_until", s.LeaseUntil)
	str("lease_by", s.LeaseBy)
	str("lapser", s.Lapser)
	num("lapses", s.Lapses)
	str("noprobe", s.NoProbe)
	num("noprobe_until", s.NoProbeUntil)
	num("pause_until", s.PauseUntil)
	num("pause_warn", s.PauseWarn)
	str("force", s.Force)
	str("force_reason", s.ForceReason)
	str("force_by", s.ForceBy)
	num("force_until", s.ForceUntil)
	str("suspect", s.Suspect)
	num("suspect_until", s.SuspectUntil)
	num("slow", s.Slow)
	str("slow_by", strings.Join(s.SlowBy, "\n"))
	str("slow_lat", joinInts(s.SlowLat))
	if s.Capped {
		out["capped"] = "1"
	}
	str("shadow", s.Shadow)
	return out
}

// joinInts renders ns comma-separated, as the scripts store a sample.
func joinInts(ns []int64) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ",")
}

// splitInts reads joinInts; malformed entries are skipped.
func splitInts(s string) []int64 {
	var out []int64
	for _, p := range strings.Split(s, ",") {
		if n, err := strconv.ParseInt(p, 10, 64); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// FromFields is the inverse of Fields: the state stored in a hash and its
// worker sets (a daemon seeding an in-memory breaker from Redis). Unknown
// fields are ignored and malformed numbers read as 0, as the scripts'
// tonumber does.
func FromFields(f map[string]string, workers, rlWorkers, pausers []string) State {
	n := func(k string) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	s := State{Phase: Phase(f["st"]), Gen: n("gen"), Fails: n("fails"), RL: n("rl"), Last: f["last"],
		Opened: n("opened"), ProbeAt: n("probe_at"), Cooldown: n("cd"), Level: n("level"), BackoffUntil: n("backoff_until"),
		Cause: Cause(f["cause"]), Lease: f["lease"], LeaseUntil: n("lease_until"),
		Force: f["force"], ForceReason: f["force_reason"], ForceBy: f["force_by"],
		ForceUntil: n("force_until"), Suspect: f["suspect"], SuspectUntil: n("suspect_until"),
		LeaseBy: f["lease_by"], Lapser: f["lapser"], Lapses: n("lapses"), NoProbe: f["noprobe"],
		NoProbeUntil: n("noprobe_until"), PauseUntil: n("pause_until"), PauseWarn: n("pause_warn")}
	s.Workers = sortedSet(workers)
	s.RLWorkers = sortedSet(rlWorkers)
	s.Pausers = sortedSet(pausers)
	s.Slow = n("slow")
	if f["slow_by"] != "" {
		s.SlowBy = sortedSet(strings.Split(f["slow_by"], "\n"))
	}
	s.SlowLat = splitInts(f["slow_lat"])
	s.Capped = n("capped") != 0
	s.Shadow = f["shadow"]
	return s
}

func sortedSet(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// addMember adds m to the sorted set unless it is there or the set
// already holds keep members (quorum.Rule.Keep: a run's sets are bounded).
func addMember(set []string, m string, keep int64) []string {
	i, found := slices.BinarySearch(set, m)
	if found || int64(len(set)) >= keep {
		return set
	}
	return slices.Insert(slices.Clone(set), i, m)
}

// clone returns a deep copy, so a step never aliases its input.
func (s State) clone() State {
	s.Workers = slices.Clone(s.Workers)
	s.RLWorkers = slices.Clone(s.RLWorkers)
	s.Pausers = slices.Clone(s.Pausers)
	s.SlowBy = slices.Clone(s.SlowBy)
	s.SlowLat = slices.Clone(s.SlowLat)
	return s
}

// fresh makes s a fresh closed breaker, generation and shadow setting
// kept; with unpin it also drops an operator's pin. The failure run's worker sets go too.
func (s *State) fresh(unpin bool) {
	*s = State{Gen: s.Gen, Force: s.Force, ForceReason: s.ForceReason, ForceBy: s.ForceBy, ForceUntil: s.ForceUntil,
		Shadow: s.Shadow}
	if unpin {
		s.Force, s.ForceReason, s.ForceBy, s.ForceUntil = "", "", "", 0
	}
}

// TTL says how long the stored keys of s live after a write at now:
// Persist for a pin without an end or an operator's shadow setting (only
// an operator ends either), Gone for a
// state with no fields (no key is kept), else the retention plus whatever
// is still due (next probe, lease, pin end, pause end).
func (s *State) TTL(now, retention int64) int64 {
	if len(s.Fields()) == 0 {
		return Gone
	}
	if s.Force != "" && s.ForceUntil == 0 || s.Shadow != "" {
		return Persist
	}
	return retention + max(0, s.ProbeAt-now, s.LeaseUntil-now, s.ForceUntil-now, s.PauseUntil-now, s.BackoffUntil-now)
}

// The special values of TTL.
const (
	Persist int64 = -1
	Gone    int64 = 0
)
