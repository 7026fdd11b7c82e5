package breaker

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestVerdictIsAllowUnmoved holds the read rule (verdict.go) to the
// machine: random calls drive a breaker through every state it can reach
// (trips, suspects, probes, lapsed leases and refused probers, throttled
// probes, pins with and without an end, pauses, shadow settings, window
// mode and slow calls), and after each call the verdict of a snapshot,
// read then or some time before, is compared with the Allow the machine
// would answer, for each worker, for any worker but the suspect, and
// under a parent's verdict.
func TestVerdictIsAllowUnmoved(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := params
		p.Rule.MinWorkers = int64(rapid.IntRange(1, 2).Draw(t, "min_workers"))
		p.SlowCallMs, p.SlowCallThreshold = 2000, 2
		p.PauseTTL = rapid.SampledFrom([]int64{0, 40000}).Draw(t, "pause_ttl")
		p.Shadow = rapid.Bool().Draw(t, "policy_shadow")
		if rapid.Bool().Draw(t, "window_mode") {
			p.WindowMs, p.FailureRate, p.MinCalls, p.SlowCallRate = 60000, 0.5, 2, 0.5
		}
		var s State
		tickets := map[string]Ticket{}
		now := int64(1_000_000)
		workers := []string{"w1", "w2", "w3"}[:rapid.IntRange(2, 3).Draw(t, "workers")]
		for i := range rapid.IntRange(1, 80).Draw(t, "steps") {
			w := rapid.SampledFrom(workers).Draw(t, "worker")
			s, now = verdictStep(t, p, s, tickets, w, i, now)
			// The snapshot was read now or some time before: nothing moved
			// the breaker since, so its verdict must hold at a later time.
			read := now - rapid.SampledFrom([]int64{0, 0, 1, 3000}).Draw(t, "read_ago")
			at := now + rapid.SampledFrom([]int64{0, 1, 4999, 5000, 10000, 40000}).Draw(t, "ask_later")
			parent := drawParent(t, at)
			for _, who := range []string{"w1", "w2", "w3", ""} {
				checkVerdict(t, p, s, Read(s, read), Query{Worker: who, Now: at, Parent: parent, PolicyShadow: p.Shadow})
			}
		}
	})
}

// verdictStep applies one random call to s (as worker w) and returns the
// new state and time.
func verdictStep(t *rapid.T, p Params, s State, tickets map[string]Ticket, w string, i int, now int64) (State, int64) {
	switch rapid.IntRange(0, 13).Draw(t, "op") {
	case 0, 1, 2:
		c := Call{Op: OpAllow, Actor: w, Token: "t" + string(rune('a'+i%26))}
		var res Result
		s, res, _ = Apply(p, s, c, now)
		d := res.Decision
		if res.ShadowDecision != pb.Decision_DECISION_UNSPECIFIED {
			d = res.ShadowDecision
		}
		switch d {
		case pb.Decision_DECISION_ALLOWED:
			tickets[w] = Ticket{Gen: s.Gen}
		case pb.Decision_DECISION_PROBE:
			tickets[w] = Ticket{Gen: s.Gen, Lease: c.Token}
		default:
			delete(tickets, w) // a denied call sends no outcome, unless only shadow mode denied it
			if ShadowDenied(res.ShadowDecision) {
				tickets[w] = Ticket{Gen: s.Gen, Shadow: true}
			}
		}
	case 3, 4, 5, 6:
		tk, ok := tickets[w]
		if !ok {
			return s, now
		}
		delete(tickets, w)
		ev := rapid.SampledFrom([]quorum.Evidence{quorum.Healthy, quorum.Failure, quorum.Failure, quorum.RateLimited,
			quorum.Throttled, quorum.Neutral, quorum.CredentialRejected, quorum.QuotaExhausted}).Draw(t, "evidence")
		s, _, _ = Apply(p, s, Call{Op: OpRecord, Actor: w, Evidence: ev, Ticket: tk, Last: "x", CredentialWorked: true,
			RetryAfter: rapid.SampledFrom([]int64{0, 3000, 30000}).Draw(t, "retry_after"),
			Latency:    rapid.SampledFrom([]int64{100, 2001}).Draw(t, "latency")}, now)
	case 7:
		c := Call{Op: OpForce, Actor: "ops", Mode: rapid.SampledFrom([]string{"open", "closed", "auto", "shadow"}).Draw(t, "mode"),
			Shadow: rapid.SampledFrom([]string{"", "on", "off"}).Draw(t, "setting"),
			TTL:    rapid.SampledFrom([]int64{0, 7000}).Draw(t, "ttl")}
		s, _, _ = Apply(p, s, c, now)
	case 8:
		s, _, _ = Apply(p, s, Call{Op: OpRecover, Actor: "d1", Ticket: Ticket{Gen: s.Gen}}, now)
	case 9, 10:
		// The worker asks and never reports (a probe lease lapses: three
		// in a row refuse the worker probes).
		s, _, _ = Apply(p, s, Call{Op: OpAllow, Actor: w, Token: "abandoned"}, now)
		delete(tickets, w)
		now += p.ProbeTimeout
	default:
		now += rapid.SampledFrom([]int64{1, 4999, 5000, 10000, 20000}).Draw(t, "advance")
	}
	return s, now
}

// drawParent draws a parent verdict as a child's Allow at now may get it.
func drawParent(t *rapid.T, now int64) Parent {
	d := rapid.SampledFrom([]pb.Decision{pb.Decision_DECISION_UNSPECIFIED, pb.Decision_DECISION_UNSPECIFIED,
		pb.Decision_DECISION_ALLOWED, pb.Decision_DECISION_PROBE, pb.Decision_DECISION_DENIED_OPEN,
		pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, pb.Decision_DECISION_DENIED_FORCED_OPEN,
		pb.Decision_DECISION_DENIED_PAUSED}).Draw(t, "parent")
	pv := Parent{Decision: d}
	if pv.Denies() {
		if off := rapid.SampledFrom([]int64{-1, 0, 1, 5000, -5000, 0}).Draw(t, "parent_until"); off != 0 || d != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			pv.Until = now + off
		}
	}
	return pv
}

// checkVerdict compares q's verdict on the snapshot read with the Allow
// the machine answers on s, the state the snapshot shows (see the
// contract in verdict.go).
func checkVerdict(t *rapid.T, p Params, s State, read View, q Query) {
	actor := q.Worker
	if actor == "" {
		actor = "w-any" // a worker that is nobody's suspect
	}
	allow := func(at int64) (State, Result) {
		next, res, _ := Apply(p, s, Call{Op: OpAllow, Actor: actor, Token: "probe", Parent: q.Parent}, at)
		return next, res
	}
	vd := read.Verdict(q)
	next, res := allow(q.Now)
	moved := res.ParentDue || !sameState(next, lapsedOnly(p, s, q.Now))
	if vd.Due != moved {
		t.Fatalf("Verdict(%+v) = %+v on %v (read at %d); Allow(%q) = %+v moved %v", q, vd, s.Fields(), read.Now, actor, res, moved)
	}
	if moved {
		return
	}
	if vd.Decision != res.Decision || vd.Shadow != res.ShadowDecision || vd.RetryAfter(q.Now) != res.RetryAfter {
		t.Fatalf("Verdict(%+v) = %+v (retry %d) on %v; Allow(%q) = %+v", q, vd, vd.RetryAfter(q.Now), s.Fields(), actor, res)
	}
	if !vd.Denied() {
		if vd.Until != 0 {
			t.Fatalf("Verdict(%+v) = %+v: not denied, yet until %d", q, vd, vd.Until)
		}
		return
	}
	if vd.Until <= q.Now {
		t.Fatalf("Verdict(%+v) = %+v: denied, not due, until %d is past", q, vd, vd.Until)
	}
	if vd.Until == Forever {
		return
	}
	if _, r := allow(vd.Until - 1); r.Decision != vd.Decision || r.ParentDue {
		t.Fatalf("Verdict(%+v) = %+v on %v; Allow(%q) at until-1 = %+v, want the same denial", q, vd, s.Fields(), actor, r)
	}
	if _, r := allow(vd.Until); r.Decision == vd.Decision && !r.ParentDue {
		t.Fatalf("Verdict(%+v) = %+v on %v; Allow(%q) at until = %+v, want the denial over", q, vd, s.Fields(), actor, r)
	}
}

// lapsedOnly is s after what lapses by itself at now (a pin's end, a
// pause's end or its alert): every call applies those first.
func lapsedOnly(p Params, s State, now int64) State {
	st := &step{p: p, s: s.clone(), now: now}
	st.expireForce()
	st.expirePause()
	return st.s
}

func sameState(a, b State) bool {
	fa, fb := a.Fields(), b.Fields()
	return len(fa) == len(fb) && sameFields(fa, fb)
}

// TestVerdictParent: a parent's verdict for any worker is the input its
// children's Allow judges: a denial until its end (0 for Forever), a
// probe due as a denial that has just ended, anything else lets through.
func TestVerdictParent(t *testing.T) {
	const now = 1_000_000
	for _, tc := range []struct {
		v    View
		want Parent
	}{
		{View{State: "closed"}, Parent{Decision: pb.Decision_DECISION_ALLOWED}},
		{View{State: "open", ProbeAt: now + 5}, Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now + 5}},
		{View{State: "open", ProbeAt: now}, Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now}},
		{View{State: "half_open", LeaseUntil: now + 9}, Parent{Decision: pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, Until: now + 9}},
		{View{State: "forced_open"}, Parent{Decision: pb.Decision_DECISION_DENIED_FORCED_OPEN}},
		{View{State: "paused", PauseUntil: now + 7}, Parent{Decision: pb.Decision_DECISION_DENIED_PAUSED, Until: now + 7}},
		{View{State: "open", ProbeAt: now + 5, Shadow: "on"}, Parent{Decision: pb.Decision_DECISION_ALLOWED}},
	} {
		if got := tc.v.Verdict(Query{Now: now}).Parent(now); got != tc.want {
			t.Errorf("Verdict(%+v).Parent() = %+v, want %+v", tc.v, got, tc.want)
		}
	}
}

// TestVerdictOfTheAPIState: the API's state of a breaker (View.Proto with
// ShadowProto), read back by ViewOfProto, gives the verdict the machine's
// own view gives for any worker and for the suspect, except that a probe
// in flight is known to last only past the snapshot when the state does
// not say until when (deny_until_ms).
func TestVerdictOfTheAPIState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := params
		p.Rule.MinWorkers = int64(rapid.IntRange(1, 2).Draw(t, "min_workers"))
		p.PauseTTL = 40000
		p.Shadow = rapid.Bool().Draw(t, "policy_shadow")
		var s State
		tickets := map[string]Ticket{}
		now := int64(1_000_000)
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			s, now = verdictStep(t, p, s, tickets, rapid.SampledFrom([]string{"w1", "w2"}).Draw(t, "worker"), i, now)
			v := Read(s, now)
			st := v.Proto("b", nil)
			ShadowProto(st, v.Shadow, p.Shadow)
			back, policyShadow := ViewOfProto(st)
			for _, who := range []string{"", v.Suspect} {
				q := Query{Worker: who, Now: now, PolicyShadow: p.Shadow}
				want := v.Verdict(q)
				want.Cause = ""
				q.PolicyShadow = policyShadow
				got := back.Verdict(q)
				if want.Decision == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT && st.GetDenyUntilMs() == 0 {
					want.Until = now + 1
				}
				if v.NoProbe != "" && want.Decision != got.Decision {
					continue // the refused prober is not on the wire
				}
				if got.Cause = ""; got != want {
					t.Fatalf("state %v: verdict %+v from the API's state, %+v from the machine's", s.Fields(), got, want)
				}
			}
		}
	})
}
