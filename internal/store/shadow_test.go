package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Shadow mode: the default policy (threshold 5, min_workers
// 2, cooldown 30s) with jitter 0, shadow as each test says.

func shadowFixture(t *testing.T, b *testredis.Backend, shadow bool) *fixture {
	t.Helper()
	p := policy.Default()
	p.Jitter, p.Shadow = 0, shadow
	return newFixture(t, b, store.Options{Policies: policy.NewSet(p)})
}

// shadowTrip sends 4 timeouts from w1 and 1 from w2 on a shadowed
// breaker: a trip, not enforced.
func (f *fixture) shadowTrip(name string) {
	f.t.Helper()
	var r *pb.RecordResponse
	for _, w := range []string{"w1", "w1", "w1", "w1", "w2"} {
		r = f.call(name, w, pb.Outcome_OUTCOME_TIMEOUT)
	}
	if s := r.State; s.State != pb.State_STATE_CLOSED || !s.Shadow || s.ShadowState != pb.State_STATE_OPEN {
		f.t.Fatalf("after a shadow trip: state %v, shadow %v, shadow_state %v; want CLOSED, true, OPEN", s.State, s.Shadow, s.ShadowState)
	}
}

func (f *fixture) setShadow(name string, s pb.ShadowSetting) *pb.BreakerState {
	f.t.Helper()
	st, err := f.st.SetShadow(context.Background(), name, s, "tuning", "ops")
	if err != nil {
		f.t.Fatalf("SetShadow(%q, %v): %v", name, s, err)
	}
	return st
}

// wantShadow checks an Allow on a shadowed breaker: ALLOWED, no wait,
// the enforced decision beside it, and the ticket marked when that is a
// denial.
func wantShadow(t *testing.T, a *pb.AllowResponse, shadow pb.Decision) {
	t.Helper()
	denied := breaker.ShadowDenied(shadow)
	if a.Decision != pb.Decision_DECISION_ALLOWED || a.RetryAfterMs != 0 || a.ShadowDecision != shadow ||
		a.Ticket.GetShadowDenied() != denied {
		t.Fatalf("Allow = %v (retry %dms, shadow %v, ticket shadow_denied %v), want ALLOWED (0ms, shadow %v, shadow_denied %v)",
			a.Decision, a.RetryAfterMs, a.ShadowDecision, a.Ticket.GetShadowDenied(), shadow, denied)
	}
	if denied && !strings.HasPrefix(a.Reason, "shadow mode, not enforced: would have been denied: ") {
		t.Errorf("reason %q, want it to say what enforced mode would have denied", a.Reason)
	}
}

func TestShadowTripAllowsAndIsRecorded(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name := f.Breaker("vendor")
		// Below the threshold: closed, shadowed, Allow says ALLOWED twice.
		wantShadow(t, f.allow(name, "w1"), pb.Decision_DECISION_ALLOWED)
		f.shadowTrip(name)

		f.ResetCounts()
		a := f.allow(name, "w3")
		wantShadow(t, a, pb.Decision_DECISION_DENIED_OPEN)
		if !strings.Contains(a.Reason, "would have been denied: it is failing: 5 failed calls in a row") {
			t.Errorf("reason %q, want the trip's words", a.Reason)
		}
		// Answering a shadow-open breaker writes nothing: one script, as
		// enforced mode's denial.
		if n := f.RoundTrips(); n != 1 {
			t.Errorf("Allow on a shadow-open breaker: %d round trips, want 1", n)
		}

		g := f.get(name)
		if g.State != pb.State_STATE_CLOSED || !g.Shadow || g.ShadowState != pb.State_STATE_OPEN ||
			g.ShadowSetting != pb.ShadowSetting_SHADOW_SETTING_POLICY || g.Failures != 5 || g.CooldownMs != 30000 ||
			!strings.HasPrefix(g.Reason, "shadow mode, not enforced: would be open: "+name+" failing: 5 consecutive failures") {
			t.Errorf("Get = %v", g)
		}

		ev := f.events(name)
		if len(ev) != 1 || ev[0]["kind"] != "transition" || ev[0]["to"] != "open" || ev[0]["shadow"] != "1" ||
			!strings.HasPrefix(ev[0]["reason"].(string), "shadow mode, not enforced: would have opened: "+name+" failing") {
			t.Fatalf("events = %v, want one shadow transition to open (would have opened)", ev)
		}
		e, err := store.EventFromStream(mustXRange(t, f, name)[0])
		if err != nil || !e.Shadow || e.To != pb.State_STATE_OPEN {
			t.Errorf("event = %v (%v), want Shadow set, to OPEN", e, err)
		}

		// The call enforced mode would have denied: its outcome counts
		// nothing and writes nothing.
		before := f.hash(name)
		f.ResetCounts()
		r := f.record(name, "w3", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
		if r.Counted || r.Note != breaker.NoteShadowDenied.String() {
			t.Errorf("Record of a shadow-denied call: counted %v, note %q; want not counted, %q", r.Counted, r.Note, breaker.NoteShadowDenied.String())
		}
		if n := f.RoundTrips(); n != 1 {
			t.Errorf("Record of a shadow-denied call: %d round trips, want 1", n)
		}
		if diff := cmp.Diff(before, f.hash(name)); diff != "" {
			t.Errorf("a shadow-denied Record changed the state (-before +after):\n%s", diff)
		}
	})
}

func TestShadowProbeIsTheFirstCallAfterTheCooldown(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name := f.Breaker("vendor")
		f.shadowTrip(name)
		f.Advance(cooldown - time.Millisecond)
		wantShadow(t, f.allow(name, "w1"), pb.Decision_DECISION_DENIED_OPEN)
		f.Advance(time.Millisecond)

		probe := f.allow(name, "w2")
		wantShadow(t, probe, pb.Decision_DECISION_PROBE)
		if probe.Ticket.LeaseToken == "" || probe.State.ShadowState != pb.State_STATE_HALF_OPEN || !probe.State.ProbeInFlight {
			t.Fatalf("the first call after the cooldown: ticket %v, shadow_state %v, probe in flight %v; want the lease, HALF_OPEN, true",
				probe.Ticket, probe.State.ShadowState, probe.State.ProbeInFlight)
		}
		// Exactly one probe: every other caller is let through, marked.
		var others []*pb.AllowResponse
		for _, w := range []string{"w1", "w3", "w4", "w2"} {
			a := f.allow(name, w)
			wantShadow(t, a, pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT)
			others = append(others, a)
		}
		// Their outcomes never settle the probe, a success included.
		for _, a := range others {
			if r := f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_SUCCESS); r.Counted || r.State.ShadowState != pb.State_STATE_HALF_OPEN {
				t.Fatalf("a non-probe's success: counted %v, shadow_state %v; want not counted, HALF_OPEN", r.Counted, r.State.ShadowState)
			}
		}
		r := f.record(name, "w2", probe.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		if !r.Counted || r.State.State != pb.State_STATE_CLOSED || r.State.ShadowState != pb.State_STATE_CLOSED || !r.State.Shadow {
			t.Fatalf("the shadow probe's success: counted %v, state %v, shadow_state %v", r.Counted, r.State.State, r.State.ShadowState)
		}
		var got []string
		for _, e := range f.events(name) {
			got = append(got, e["from"].(string)+">"+e["to"].(string)+" shadow="+e["shadow"].(string))
		}
		want := []string{"closed>open shadow=1", "open>half_open shadow=1", "half_open>closed shadow=1"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if ev := f.events(name); !strings.HasPrefix(ev[2]["reason"].(string), "shadow mode, not enforced: would have closed: ") {
			t.Errorf("close reason %q", ev[2]["reason"])
		}
	})
}

func TestShadowFailedProbeGrowsTheCooldown(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name := f.Breaker("vendor")
		f.shadowTrip(name)
		f.Advance(cooldown)
		probe := f.allow(name, "w1")
		wantShadow(t, probe, pb.Decision_DECISION_PROBE)
		r := f.record(name, "w1", probe.Ticket, pb.Outcome_OUTCOME_SERVER_ERROR)
		if !r.Counted || r.State.ShadowState != pb.State_STATE_OPEN || r.State.FailedProbes != 1 || r.State.CooldownMs != 60000 {
			t.Fatalf("a failed shadow probe: counted %v, shadow_state %v, failed probes %d, cooldown %dms; want counted, OPEN, 1, 60000",
				r.Counted, r.State.ShadowState, r.State.FailedProbes, r.State.CooldownMs)
		}
		// The next shadow probe is due a doubled cooldown later, not 30s.
		f.Advance(2*cooldown - time.Millisecond)
		wantShadow(t, f.allow(name, "w2"), pb.Decision_DECISION_DENIED_OPEN)
		f.Advance(time.Millisecond)
		wantShadow(t, f.allow(name, "w2"), pb.Decision_DECISION_PROBE)
	})
}

// TestShadowSuspectsOutcomesDoNotCount: a worker enforced mode would have
// denied (a suspect) is let through, and its outcomes count nothing: its
// success does not end the failure run it alone built.
func TestShadowSuspectsOutcomesDoNotCount(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name := f.Breaker("vendor")
		for range 5 {
			f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		a := f.allow(name, "w1")
		wantShadow(t, a, pb.Decision_DECISION_DENIED_SUSPECT_WORKER)
		if r := f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_SUCCESS); r.Counted || r.State.Failures != 5 || r.State.SuspectWorker != "w1" {
			t.Fatalf("the suspect's success: counted %v, failures %d, suspect %q; want not counted, 5, w1", r.Counted, r.State.Failures, r.State.SuspectWorker)
		}
		// Another worker's failure makes the quorum: a shadow trip.
		if r := f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT); r.State.ShadowState != pb.State_STATE_OPEN || r.State.State != pb.State_STATE_CLOSED {
			t.Errorf("w2's failure: state %v, shadow_state %v; want CLOSED, OPEN", r.State.State, r.State.ShadowState)
		}
	})
}

func TestShadowOperatorSetting(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, false) // an enforced policy
		name := f.Breaker("vendor")
		st := f.setShadow(name, pb.ShadowSetting_SHADOW_SETTING_ON)
		if !st.Shadow || st.ShadowSetting != pb.ShadowSetting_SHADOW_SETTING_ON || st.Generation != 1 {
			t.Fatalf("SetShadow(ON) = %v", st)
		}
		// The setting is the operator's: it outlives every TTL, as a pin does.
		if ttl := f.Client.PTTL(context.Background(), store.KeysOf(name).State).Val(); ttl != -1 {
			t.Errorf("state key TTL %v with a shadow setting, want none (-1)", ttl)
		}
		f.shadowTrip(name)
		wantShadow(t, f.allow(name, "w3"), pb.Decision_DECISION_DENIED_OPEN)

		// Off: the machine is kept, now enforced: open at once.
		st = f.setShadow(name, pb.ShadowSetting_SHADOW_SETTING_OFF)
		if st.State != pb.State_STATE_OPEN || st.Shadow || st.ShadowSetting != pb.ShadowSetting_SHADOW_SETTING_OFF {
			t.Fatalf("SetShadow(OFF) = %v, want OPEN, enforced", st)
		}
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.ShadowDecision != pb.Decision_DECISION_UNSPECIFIED {
			t.Errorf("Allow after OFF = %v (shadow %v), want DENIED_OPEN", a.Decision, a.ShadowDecision)
		}
		// On again, then back to the (enforced) policy.
		f.setShadow(name, pb.ShadowSetting_SHADOW_SETTING_ON)
		wantShadow(t, f.allow(name, "w3"), pb.Decision_DECISION_DENIED_OPEN)
		st = f.setShadow(name, pb.ShadowSetting_SHADOW_SETTING_POLICY)
		if st.State != pb.State_STATE_OPEN || st.Shadow || st.ShadowSetting != pb.ShadowSetting_SHADOW_SETTING_POLICY {
			t.Fatalf("SetShadow(POLICY) = %v, want OPEN, enforced", st)
		}
		var got []string
		for _, e := range f.events(name) {
			if e["cause"] == "shadow" {
				got = append(got, e["kind"].(string)+" shadow="+str(e["shadow"])+": "+e["reason"].(string))
			}
		}
		want := []string{
			"forced shadow=1: shadow setting changed: the breaker is now shadowed (Allow always allows; transitions are recorded, not enforced): tuning",
			"forced shadow=: shadow setting changed: the breaker is now enforced: tuning",
			"forced shadow=1: shadow setting changed: the breaker is now shadowed (Allow always allows; transitions are recorded, not enforced): tuning",
			"forced shadow=: shadow setting changed: the breaker is now enforced: tuning",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("shadow events (-want +got):\n%s", diff)
		}
	})
}

// TestShadowOperatorOffOverridesThePolicy: shadow: true in the policy, an
// operator's OFF enforces the one breaker; AUTO keeps the setting.
func TestShadowOperatorOffOverridesThePolicy(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name, other := f.Breaker("vendor"), f.Breaker("other")
		f.setShadow(name, pb.ShadowSetting_SHADOW_SETTING_OFF)
		f.trip(name) // enforced: Record answers OPEN
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Errorf("Allow = %v, want DENIED_OPEN", a.Decision)
		}
		if _, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		if g := f.get(name); g.ShadowSetting != pb.ShadowSetting_SHADOW_SETTING_OFF || g.Shadow {
			t.Errorf("after AUTO: shadow_setting %v, shadow %v; want OFF kept, enforced", g.ShadowSetting, g.Shadow)
		}
		f.shadowTrip(other) // the policy's shadow still applies to the others
	})
}

func TestShadowForcedOpenWins(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name := f.Breaker("vendor")
		st, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_OPEN, "vendor incident", 0, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if st.State != pb.State_STATE_FORCED_OPEN || st.Shadow {
			t.Fatalf("Force OPEN on a shadowed breaker: %v, shadow %v; want FORCED_OPEN, not shadowed", st.State, st.Shadow)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || a.ShadowDecision != pb.Decision_DECISION_UNSPECIFIED {
			t.Errorf("Allow = %v (shadow %v), want DENIED_FORCED_OPEN, no shadow decision", a.Decision, a.ShadowDecision)
		}
		// Even an operator's ON does not lift the pin.
		f.setShadow(name, pb.ShadowSetting_SHADOW_SETTING_ON)
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Errorf("Allow with shadow ON and a pin = %v, want DENIED_FORCED_OPEN", a.Decision)
		}
		ev := f.events(name)
		if ev[0]["shadow"] != nil {
			t.Errorf("the pin's event is marked shadow: %v", ev[0])
		}
		// AUTO ends the pin: shadowed again.
		if _, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		f.shadowTrip(name)
	})
}

func (f *fixture) hash(name string) map[string]string {
	f.t.Helper()
	h, err := f.Client.HGetAll(context.Background(), store.KeysOf(name).State).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

func str(v any) string { s, _ := v.(string); return s }

func mustXRange(t *testing.T, f *fixture, name string) []redis.XMessage {
	t.Helper()
	msgs, err := f.Client.XRange(context.Background(), store.EventsKey(name), "-", "+").Result()
	if err != nil || len(msgs) == 0 {
		t.Fatalf("XRANGE: %v (%d entries)", err, len(msgs))
	}
	return msgs
}

// TestShadowPolicyReloadKeepsTheState: a reload that drops shadow: true
// enforces the state shadow mode reached (the machine is one machine;
// only Allow's enforcement changes), and a reload back shadows it again.
func TestShadowPolicyReloadKeepsTheState(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := shadowFixture(t, b, true)
		name := f.Breaker("vendor")
		f.shadowTrip(name)
		p := policy.Default()
		p.Jitter = 0
		f.st.SetPolicies(policy.NewSet(p))
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.ShadowDecision != pb.Decision_DECISION_UNSPECIFIED {
			t.Fatalf("Allow after a reload without shadow = %v (shadow %v), want DENIED_OPEN", a.Decision, a.ShadowDecision)
		}
		if g := f.get(name); g.State != pb.State_STATE_OPEN || g.Shadow || g.Generation != 1 {
			t.Errorf("Get after the reload: %v, shadow %v, generation %d; want OPEN, enforced, 1", g.State, g.Shadow, g.Generation)
		}
		p.Shadow = true
		f.st.SetPolicies(policy.NewSet(p))
		wantShadow(t, f.allow(name, "w3"), pb.Decision_DECISION_DENIED_OPEN)
	})
}
