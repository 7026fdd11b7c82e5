package breaker

import (
	"math"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The read rule. Every reader of a breaker (a List, a Watch, a BatchGet,
// the fast view of pkg/client, a parent scope's view in internal/scope)
// asks the same question of a snapshot: what would the next Allow answer,
// and until when? View.Verdict answers it once, from a View (the scripts'
// snapshot, or Read of a stored State), without taking a lease and without
// moving the breaker, on the fleet's clock (Redis TIME):
//
//   - Query.Worker names the asking worker, or "" for any worker but the
//     suspect (what List, Watch and BatchGet report, and what a parent
//     scope's children see).
//   - Query.Now may be later than the snapshot (View.Now): the verdict of
//     a snapshot held in memory stays exact as long as no call moved the
//     breaker since. A pin or a pause whose end has passed reads as the
//     fresh closed breaker the next call makes of it; a denial whose end
//     has passed reads as what comes after it.
//   - Query.Parent is the parent scope's verdict (parent.go), judged as
//     Allow judges it; Verdict.Parent turns a parent's own verdict into
//     that input for its children.
//
// The contract, held to the machine by TestVerdictIsAllowUnmoved: for
// every reachable state, worker, parent verdict and time, Verdict.Due is
// set exactly when that Allow would move the breaker (open to half-open,
// a probe lease taken or a lapsed one counted) or must ask the parent
// (Result.ParentDue); otherwise Allow answers Verdict.Decision and
// Verdict.Shadow, its retry_after is Verdict.RetryAfter, it still gives
// the same denial at Until-1 and no longer at Until, and it changes
// nothing but what lapses by itself (a pin's end, a pause's end or its
// alert). A Due verdict still says what Allow most likely answers (PROBE,
// or DENIED_SUSPECT_WORKER for the worker refused probes); only the
// store's script decides it.

// Forever is Verdict.Until for a denial only an operator ends: a pin
// without an end, a pause without one, or a parent's such denial.
const Forever int64 = math.MaxInt64

// Query says whom a Verdict is for, and when.
type Query struct {
	// Worker is the asking worker; "" asks for any worker but the
	// suspect (worker ids are never empty).
	Worker string
	// Now is the time on the fleet's clock, ms since the epoch: the
	// snapshot's (View.Now) or later.
	Now int64
	// Parent is the parent scope's verdict; the zero value for a breaker
	// without a parent.
	Parent Parent
	// PolicyShadow is the policy's shadow field (Params.Shadow), which an
	// operator's setting (View.Shadow) overrides.
	PolicyShadow bool
}

// Verdict is what an Allow would answer, read without moving the breaker.
type Verdict struct {
	// Decision is the enforced answer: ALLOWED, a DENIED_*, or PROBE when
	// the next Allow would take the probe lease (Due is then set). In
	// shadow mode it is ALLOWED and Shadow holds the enforced answer.
	Decision pb.Decision
	// Until is when the denial ends by itself, ms since the epoch on the
	// fleet's clock: the next probe, the probe lease's end, a suspect's,
	// a pin's, a pause's or the parent's end; Forever when only an
	// operator ends it; 0 when the caller is not denied (ALLOWED, PROBE,
	// shadow mode). An Until at or before Query.Now comes only with Due
	// (the parent's denial has ended and the parent must be asked).
	Until int64
	// Cause says why the breaker denies: the state's cause (trip, window,
	// slow, rate_limit, probe_failed, credential, quota, suspect, ...),
	// CauseForced for a pin, CauseProbeAbandoned for a worker refused
	// probes; empty for a parent's denial (Parent.Name and Parent.Reason
	// say why) and when nothing denies.
	Cause Cause
	// Due says the read cannot stand for the Allow: it would move the
	// breaker (open to half-open, a probe lease taken, a lapsed lease
	// counted) or ask the parent's own script (Result.ParentDue). Only the
	// store answers such an Allow; a cache must not.
	Due bool
	// Shadow is, in shadow mode, what enforced mode would answer (Allow's
	// Result.ShadowDecision); UNSPECIFIED when the breaker is enforced.
	Shadow pb.Decision
}

// Denied reports whether the enforced answer is a denial.
func (vd Verdict) Denied() bool {
	return vd.Decision != pb.Decision_DECISION_ALLOWED && vd.Decision != pb.Decision_DECISION_PROBE &&
		vd.Decision != pb.Decision_DECISION_UNSPECIFIED
}

// RetryAfter is the retry_after Allow answers with the verdict at now,
// ms: what is left of a timed denial; 0 when the caller is not denied,
// when only an operator ends the denial, and for a pause (it lapses by
// itself only after pause_ttl, hours in which a person is expected to
// act; Until says when).
func (vd Verdict) RetryAfter(now int64) int64 {
	if !vd.Denied() || vd.Until == Forever || vd.Decision == pb.Decision_DECISION_DENIED_PAUSED {
		return 0
	}
	return max(0, vd.Until-now)
}

// Parent returns a parent breaker's verdict for any worker (Query.Worker
// "") as its children's Allow receives it (the rule is parent.go's): a
// denial until Until (0 for Forever); a probe due reads as a denial that
// ended at now, so the child's script finds it due and the parent's own
// script decides who probes; anything else (closed, pinned closed, shadow
// mode) lets calls through. Name, Reason and Gen are the caller's to fill.
func (vd Verdict) Parent(now int64) Parent {
	switch {
	case vd.Denied():
		until := vd.Until
		if until == Forever {
			until = 0
		}
		return Parent{Decision: vd.Decision, Until: until}
	case vd.Due:
		return Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: max(now, 1)}
	}
	return Parent{Decision: pb.Decision_DECISION_ALLOWED}
}

// Verdict is the read rule (see above): what an Allow by q.Worker at
// q.Now would answer on the breaker v shows.
func (v View) Verdict(q Query) Verdict {
	v = v.lapsed(q.Now)
	vd := v.enforced(q)
	if vd.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN && v.State != "forced_open" &&
		v.State != "forced_closed" && ShadowOn(v.Shadow, q.PolicyShadow) {
		// Shadow mode (shadow.go): the machine runs, Allow allows. A
		// parent's denial is the parent's word, enforced (parent.go).
		vd.Shadow, vd.Decision, vd.Until = vd.Decision, pb.Decision_DECISION_ALLOWED, 0
	}
	return vd
}

// lapsed returns v as the next call finds it at now: a pin or a pause
// whose end has passed is the fresh closed breaker that call makes of it
// (the operator's shadow setting kept, as State.fresh keeps it).
func (v View) lapsed(now int64) View {
	pin := (v.State == "forced_open" || v.State == "forced_closed") && v.ForceUntil > 0 && now >= v.ForceUntil
	pause := v.State == string(Paused) && v.PauseUntil > 0 && now >= v.PauseUntil
	if pin || pause {
		return View{State: string(Closed), Gen: v.Gen + 1, Shadow: v.Shadow, Now: now}
	}
	return v
}

// enforced is the verdict in enforced mode, in the order step.allow
// decides: a pin, the parent, a pause, a suspect, then the phase.
func (v View) enforced(q Query) Verdict {
	now := q.Now
	switch v.State {
	case "forced_open":
		return Verdict{Decision: pb.Decision_DECISION_DENIED_FORCED_OPEN, Until: orForever(v.ForceUntil), Cause: CauseForced}
	case "forced_closed":
		return Verdict{Decision: pb.Decision_DECISION_ALLOWED}
	}
	if p := q.Parent; p.Denies() {
		return Verdict{Decision: pb.Decision_DECISION_DENIED_PARENT_OPEN, Until: orForever(p.Until),
			Due: p.Until != 0 && now >= p.Until}
	}
	switch Phase(v.State) {
	case Paused:
		return Verdict{Decision: pb.Decision_DECISION_DENIED_PAUSED, Until: orForever(v.PauseUntil), Cause: v.Cause}
	case Closed, "":
		if v.Suspect != "" && v.Suspect == q.Worker && now < v.SuspectUntil {
			return Verdict{Decision: pb.Decision_DECISION_DENIED_SUSPECT_WORKER, Until: v.SuspectUntil,
				Cause: orCause(v.Cause, CauseSuspect)}
		}
		return Verdict{Decision: pb.Decision_DECISION_ALLOWED}
	case Open:
		if now < v.ProbeAt {
			return Verdict{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: v.ProbeAt, Cause: v.Cause}
		}
		return v.probeDue(q, true) // the cooldown is over: Allow half-opens the breaker
	case HalfOpen:
		if v.LeaseUntil > now {
			return Verdict{Decision: pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, Until: v.LeaseUntil, Cause: v.Cause}
		}
		if now < v.ProbeAt { // the last probe was told to wait (a 429 within its deadline)
			return Verdict{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: v.ProbeAt, Cause: v.Cause}
		}
		return v.probeDue(q, v.LeaseUntil > 0) // a lapsed lease is counted against its holder
	}
	// A state this build does not know (written by a newer daemon): only
	// the store can answer.
	return Verdict{Decision: pb.Decision_DECISION_UNSPECIFIED, Due: true}
}

// probeDue is the verdict once a probe may go out: the caller takes the
// lease (PROBE), unless it is the worker refused probes (step.lapsed).
// moves says Allow writes even for a refused worker.
func (v View) probeDue(q Query, moves bool) Verdict {
	if v.NoProbe != "" && v.NoProbe == q.Worker && q.Now < v.NoProbeUntil {
		return Verdict{Decision: pb.Decision_DECISION_DENIED_SUSPECT_WORKER, Until: v.NoProbeUntil,
			Cause: CauseProbeAbandoned, Due: moves}
	}
	return Verdict{Decision: pb.Decision_DECISION_PROBE, Due: true}
}

func orForever(until int64) int64 {
	if until == 0 {
		return Forever
	}
	return until
}

func orCause(c, otherwise Cause) Cause {
	if c == "" {
		return otherwise
	}
	return c
}
