package breaker

import (
	"github.com/breakerd/breakerd/internal/probe"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// View is what a caller may see of a breaker at a moment: the scripts'
// snapshot reply, and what Read returns. View.Verdict (verdict.go) reads
// from it what the next Allow would answer.
type View struct {
	State   string // public name: closed, open, half_open, paused, forced_open, forced_closed
	Gen     int64
	Fails   int64
	Workers int64 // distinct workers in the failure run
	RL      int64
	Opened  int64 // ms since the epoch
	ProbeAt int64 // ms since the epoch
	// Cooldown is the open period, ms.
	Cooldown    int64
	Cause       Cause
	Last        string
	InFlight    bool // a probe lease is live
	Level       int64
	ForceBy     string
	ForceReason string
	ForceUntil  int64 // ms since the epoch; 0: until AUTO
	Suspect     string
	// SuspectUntil is when the suspect worker is allowed again, ms since
	// the epoch.
	SuspectUntil int64
	// PauseUntil is when a pause lapses by itself, ms since the epoch.
	PauseUntil int64
	// Slow is the slow run: consecutive slow calls (consecutive mode).
	Slow int64
	// Capped: a trip was stopped by the group's open-fraction cap since
	// the runs last ended (State.Capped).
	Capped bool
	// Now is the time the view was taken, ms since the epoch.
	Now int64
	// Shadow is the operator's shadow setting (State.Shadow): "on",
	// "off", or "" to follow the policy. ShadowProto resolves it.
	Shadow string
	// LeaseUntil is when the probe lease lapses, ms since the epoch: set
	// while a lease is stored (half-open), live or lapsed; 0 when none.
	LeaseUntil int64
	// NoProbe is the worker refused probes after MaxLapses lapsed leases
	// in a row, until NoProbeUntil (ms since the epoch).
	NoProbe      string
	NoProbeUntil int64
}

// ViewOf returns the view of s at now. A breaker that holds no state is
// closed at generation 0 and its view reads no clock (Now is 0): a healthy
// call costs the scripts no TIME.
func ViewOf(s State, now int64) View {
	if len(s.Fields()) == 0 {
		return View{State: string(Closed)}
	}
	return View{State: s.Public(), Gen: s.Gen, Fails: s.Fails, Workers: int64(len(s.Workers)), RL: s.RL,
		Opened: s.Opened, ProbeAt: s.ProbeAt, Cooldown: s.Cooldown, Cause: s.Cause, Last: s.Last,
		InFlight: s.phase() == HalfOpen && probe.LeaseLive(s.Lease, s.LeaseUntil, now), Level: s.Level,
		ForceBy: s.ForceBy, ForceReason: s.ForceReason, ForceUntil: s.ForceUntil,
		Suspect: s.Suspect, SuspectUntil: s.SuspectUntil, PauseUntil: s.PauseUntil, Slow: s.Slow, Capped: s.Capped, Now: now,
		Shadow: s.Shadow, LeaseUntil: s.LeaseUntil, NoProbe: s.NoProbe, NoProbeUntil: s.NoProbeUntil}
}

// Read returns the view of s at now without changing anything: a pin or
// a pause whose time is up reads as the fresh closed state the next write
// will make of it.
func Read(s State, now int64) View {
	if s.Force != "" && s.ForceUntil > 0 && now >= s.ForceUntil {
		s = s.clone()
		s.fresh(true)
	} else if s.Force == "" && s.phase() == Paused && s.PauseUntil > 0 && now >= s.PauseUntil {
		s = s.clone()
		s.fresh(false)
	}
	return ViewOf(s, now)
}

// publicStates maps the public names to the API's states.
var publicStates = map[string]pb.State{
	"closed":        pb.State_STATE_CLOSED,
	"open":          pb.State_STATE_OPEN,
	"half_open":     pb.State_STATE_HALF_OPEN,
	"forced_open":   pb.State_STATE_FORCED_OPEN,
	"forced_closed": pb.State_STATE_FORCED_CLOSED,
	"paused":        pb.State_STATE_PAUSED,
}

// StateOf returns the API's state for a public name; a name this build
// does not know (written by a newer daemon) is STATE_UNSPECIFIED.
func StateOf(public string) pb.State { return publicStates[public] }

// Proto renders v as the API's BreakerState for the named breaker, the
// reason in plain words, as enforced mode shows it: ShadowProto adds
// shadow mode, which depends on the policy. Its denial is the fleet's
// (any worker but the suspect) and suspect_denial the suspect's own,
// with no parent: a parent's denial is the caller's to add.
func (v View) Proto(name string, alternatives []string) *pb.BreakerState {
	st := &pb.BreakerState{
		Breaker:         name,
		State:           StateOf(v.State),
		Generation:      v.Gen,
		Failures:        v.Fails,
		DistinctWorkers: v.Workers,
		OpenedAtMs:      v.Opened,
		NextProbeAtMs:   v.ProbeAt,
		CooldownMs:      v.Cooldown,
		Reason:          StateReason(name, v),
		LastFailure:     SlowPhrase(Spoken(v.Last)),
		SlowCalls:       v.Slow,
		ProbeInFlight:   v.InFlight,
		FailedProbes:    v.Level,
		ForcedBy:        v.ForceBy,
		ForcedUntilMs:   v.ForceUntil,
		AsOfMs:          v.Now,
		SuspectWorker:   v.Suspect,
		SuspectUntilMs:  v.SuspectUntil,
		PausedUntilMs:   v.PauseUntil,
		Alternatives:    alternatives,
	}
	st.OpenFractionCapped = v.Capped
	vd := v.Verdict(Query{Now: v.Now}) // the fleet's: any worker but the suspect
	st.DenyUntilMs = vd.denyUntil()
	st.LastFailureMessage = Message(v.Last)
	st.Denial = denialOf(name, v, vd, nil)
	if v.Suspect != "" {
		if d := v.DenialOf(name, Query{Worker: v.Suspect, Now: v.Now}, nil); d.GetScope() == pb.DenialScope_DENIAL_SCOPE_WORKER {
			st.SuspectDenial = d
		}
	}
	return st
}

// DenyUntil is BreakerState.deny_until_ms: until when the read rule
// (Verdict) denies worker ("" for any worker but the suspect) at the
// snapshot's time, the breaker enforced; 0 when it does not deny, or when
// the next Allow is due to move it (a probe). ShadowProto clears it for
// a shadowed breaker.
func (v View) DenyUntil(worker string) int64 {
	return v.Verdict(Query{Worker: worker, Now: v.Now}).denyUntil()
}

// denyUntil is DenyUntil of the verdict vd.
func (vd Verdict) denyUntil() int64 {
	if !vd.Holds() {
		return 0
	}
	return vd.Until
}

// Holds reports whether vd denies until a time, rather than letting the
// next Allow move the breaker (Due: a probe).
func (vd Verdict) Holds() bool { return vd.Denied() && !vd.Due }

// ViewOfProto is the inverse of View.Proto and ShadowProto, as far as the
// API's state says: the machine's state (shadow_state when shadowed), its
// times on the fleet's clock, and the operator's shadow setting. The
// lease's end is deny_until_ms while a probe is in flight; the refused
// prober and the cause are not on the wire (a verdict for any worker
// needs neither). policyShadow is the policy's shadow field as the state
// shows it (shadowed with no operator setting).
func ViewOfProto(st *pb.BreakerState) (v View, policyShadow bool) {
	state := st.GetState()
	if st.GetShadow() {
		state = st.GetShadowState()
	}
	v = View{State: EnumName(state), Gen: st.GetGeneration(), Fails: st.GetFailures(),
		Workers: st.GetDistinctWorkers(), Opened: st.GetOpenedAtMs(), ProbeAt: st.GetNextProbeAtMs(),
		Cooldown: st.GetCooldownMs(), Last: st.GetLastFailure(), InFlight: st.GetProbeInFlight(),
		Level: st.GetFailedProbes(), ForceBy: st.GetForcedBy(), ForceUntil: st.GetForcedUntilMs(),
		Suspect: st.GetSuspectWorker(), SuspectUntil: st.GetSuspectUntilMs(), PauseUntil: st.GetPausedUntilMs(),
		Slow: st.GetSlowCalls(), Capped: st.GetOpenFractionCapped(), Now: st.GetAsOfMs()}
	if state == pb.State_STATE_UNSPECIFIED {
		v.State = string(Closed)
	}
	switch st.GetShadowSetting() {
	case pb.ShadowSetting_SHADOW_SETTING_ON:
		v.Shadow = "on"
	case pb.ShadowSetting_SHADOW_SETTING_OFF:
		v.Shadow = "off"
	default:
		policyShadow = st.GetShadow()
	}
	if v.InFlight {
		// The lease was live when the snapshot was read; when it ends is
		// deny_until_ms, or, when the state does not say, the first ms
		// after the snapshot (the least it can be).
		v.LeaseUntil = max(st.GetDenyUntilMs(), v.Now+1)
	}
	return v, policyShadow
}
