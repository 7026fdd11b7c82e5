package store_test

// The alerts the scripts raise besides transitions: stuck_open,
// suspect_worker and the credential_revoked pause. Same suite style: both
// backends, time moved with Advance.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// kinds returns the kind of each event in the breaker's log, in order.
func (f *fixture) kinds(breaker string) []string {
	f.t.Helper()
	var out []string
	for _, e := range f.events(breaker) {
		out = append(out, e["kind"].(string))
	}
	return out
}

func count(kinds []string, kind string) int {
	n := 0
	for _, k := range kinds {
		if k == kind {
			n++
		}
	}
	return n
}

// failProbe waits out the cooldown, takes the probe and fails it.
func (f *fixture) failProbe(breaker string) *pb.RecordResponse {
	f.t.Helper()
	f.Advance(time.Duration(f.get(breaker).CooldownMs) * time.Millisecond)
	a := f.allow(breaker, "w1")
	if a.Decision != pb.Decision_DECISION_PROBE {
		f.t.Fatalf("Allow(%q) after the cooldown = %v, want PROBE", breaker, a.Decision)
	}
	return f.record(breaker, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
}

func TestStuckOpenOncePerOpenPeriod(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		for spell := range 2 {
			f.trip(name)
			f.failProbe(name)
			if n := count(f.kinds(name), "stuck_open"); n != spell {
				t.Fatalf("open period %d, after 1 failed probe: %d stuck_open events, want %d (one cooldown cycle is not stuck)", spell, n, spell)
			}
			r := f.failProbe(name)
			ev := f.events(name)
			last := ev[len(ev)-1]
			if last["kind"] != "stuck_open" || last["from"] != "open" || last["to"] != "open" || last["gen"] != strconv.FormatInt(r.State.Generation, 10) {
				t.Fatalf("open period %d, after the 2nd failed probe: last event %v, want stuck_open at gen %d", spell, last, r.State.Generation)
			}
			if !strings.Contains(last["reason"].(string), "still open after 2 cooldown cycles") {
				t.Errorf("stuck_open reason %q does not say why", last["reason"])
			}
			for range 3 {
				f.failProbe(name)
			}
			if n := count(f.kinds(name), "stuck_open"); n != spell+1 {
				t.Fatalf("open period %d, after 5 failed probes: %d stuck_open events, want %d (once per open period)", spell, n, spell+1)
			}
			// Recover, and stay closed until the backoff starts over: the
			// next open period may raise its own.
			cd := time.Duration(f.get(name).CooldownMs) * time.Millisecond
			f.Advance(cd)
			a := f.allow(name, "w1")
			if r := f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_SUCCESS); r.State.State != pb.State_STATE_CLOSED {
				t.Fatalf("probe success: %v, want CLOSED", r.State.State)
			}
			f.Advance(2 * cd)
		}
	})
}

func TestSuspectWorker(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		for range 4 {
			f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("below the threshold: Allow(w1) = %v, want ALLOWED", a.Decision)
		}
		r := f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		if r.State.State != pb.State_STATE_CLOSED || r.State.SuspectWorker != "w1" || r.State.SuspectUntilMs != r.State.AsOfMs+cooldown.Milliseconds() {
			t.Fatalf("5th failure from w1 alone: %v suspect %q until %d; want CLOSED, suspect w1 until %d", r.State.State, r.State.SuspectWorker, r.State.SuspectUntilMs, r.State.AsOfMs+cooldown.Milliseconds())
		}
		ev := f.events(name)
		if len(ev) != 1 || ev[0]["kind"] != "suspect_worker" || ev[0]["actor"] != "w1" || ev[0]["to"] != "closed" {
			t.Fatalf("events = %v, want one suspect_worker from w1", ev)
		}

		// w1 alone is denied; the fleet is not.
		b.ResetCounts()
		a := f.allow(name, "w1")
		if a.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER || a.RetryAfterMs != cooldown.Milliseconds() || !strings.Contains(a.Reason, "only this worker's calls to it have failed") || strings.Contains(a.Reason, "w1") ||
			a.GetDenial().GetStatus() != "worker_isolated" || a.GetDenial().GetScope() != pb.DenialScope_DENIAL_SCOPE_WORKER {
			t.Fatalf("Allow(w1) = %v retry %dms %q; want DENIED_SUSPECT_WORKER 30000ms, this worker's problem, no worker id", a.Decision, a.RetryAfterMs, a.Reason)
		}
		if rt := b.RoundTrips(); rt != 1 {
			t.Errorf("the suspect's Allow took %d round trips, want 1", rt)
		}
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow(w2) = %v, want ALLOWED (the fleet stays closed)", a.Decision)
		}

		// More of w1's in-flight failures, and its failures after the
		// suspicion lapsed, renew it without a second event.
		f.record(name, "w1", &pb.Ticket{}, pb.Outcome_OUTCOME_TIMEOUT)
		f.Advance(cooldown)
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("a cooldown after w1's last failure: Allow(w1) = %v, want ALLOWED", a.Decision)
		}
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER {
			t.Fatalf("w1 failed again alone: Allow(w1) = %v, want DENIED_SUSPECT_WORKER", a.Decision)
		}
		if n := count(f.kinds(name), "suspect_worker"); n != 1 {
			t.Fatalf("%d suspect_worker events in one failure run, want 1", n)
		}

		// Another worker's success ends the run and the suspicion.
		f.call(name, "w2", pb.Outcome_OUTCOME_SUCCESS)
		if st := f.get(name); st.SuspectWorker != "" || st.Failures != 0 {
			t.Fatalf("after w2's success: suspect %q, %d failures; want none", st.SuspectWorker, st.Failures)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("after w2's success: Allow(w1) = %v, want ALLOWED", a.Decision)
		}

		// A new run raises a new event; another worker's failure confirms
		// it: the circuit trips and the suspicion ends.
		for range 5 {
			f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		if n := count(f.kinds(name), "suspect_worker"); n != 2 {
			t.Fatalf("%d suspect_worker events after a second run, want 2", n)
		}
		r = f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT)
		if r.State.State != pb.State_STATE_OPEN || r.State.SuspectWorker != "" {
			t.Fatalf("w2 confirms: %v suspect %q, want OPEN and no suspect", r.State.State, r.State.SuspectWorker)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Fatalf("Allow(w1) on the open circuit = %v, want DENIED_OPEN", a.Decision)
		}
	})
}

func TestSuspectWorkerNeedsQuorumAboveOne(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		oneWorker := policy.Default()
		oneWorker.MinWorkers = 1
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(oneWorker)})
		name := f.Breaker("local_tool")
		for range 5 {
			f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		if st := f.get(name); st.State != pb.State_STATE_OPEN || st.SuspectWorker != "" {
			t.Fatalf("min_workers 1, 5 failures from w1: %v suspect %q; want OPEN, no suspect", st.State, st.SuspectWorker)
		}
		if n := count(f.kinds(name), "suspect_worker"); n != 0 {
			t.Fatalf("%d suspect_worker events with min_workers 1, want 0", n)
		}
	})
}

func TestCredentialRevokedPausesUntilAnOperatorResumes(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ctx := context.Background()
		name := f.Breaker("github:token_7")
		worked := func(r *pb.RecordRequest) { r.CredentialWorked = true }

		// A 401 from a worker that never saw the credential work: an
		// alert, no pause (the credential may never have been right).
		f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED)
		if st := f.get(name); st.State != pb.State_STATE_CLOSED {
			t.Fatalf("401 without credential_worked: %v, want CLOSED", st.State)
		}
		// A 401 after it worked, from one worker alone: that worker is
		// isolated, the fleet keeps the breaker.
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		r := f.call(name, "w2", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		if r.Counted || r.State.State != pb.State_STATE_CLOSED || r.State.SuspectWorker != "w2" {
			t.Fatalf("a lone 401 with credential_worked: counted %v, %v, suspect %q; want not counted, CLOSED, w2 suspected", r.Counted, r.State.State, r.State.SuspectWorker)
		}
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER {
			t.Fatalf("Allow(w2) after its lone 401 = %v, want DENIED_SUSPECT_WORKER", a.Decision)
		}
		// A second worker confirms: paused, for the pause TTL (1h).
		r = f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		if r.Counted || r.State.State != pb.State_STATE_PAUSED || r.State.Failures != 0 {
			t.Fatalf("a confirmed 401: counted %v, %v, %d failures; want not counted, PAUSED, 0", r.Counted, r.State.State, r.State.Failures)
		}
		ev := f.events(name)
		if len(ev) != 3 || ev[2]["kind"] != "credential_revoked" || ev[2]["from"] != "closed" || ev[2]["to"] != "paused" || ev[2]["actor"] != "w1" {
			t.Fatalf("events = %v, want credential_revoked closed -> paused by w1 last", ev)
		}
		for _, w := range []string{"w1", "w2", "w3"} {
			a := f.allow(name, w)
			if a.Decision != pb.Decision_DECISION_DENIED_PAUSED || a.RetryAfterMs != 0 || !strings.Contains(a.Reason, "rejected the credential") ||
				!strings.Contains(a.Reason, "a person must check it") || a.GetDenial().GetMayReturnAtMs() != a.GetState().GetPausedUntilMs() {
				t.Fatalf("Allow(%s) on a paused breaker = %v retry %dms %q; want DENIED_PAUSED 0ms, needs a human, may return when the pause lapses", w, a.Decision, a.RetryAfterMs, a.Reason)
			}
		}
		// Not a trip: no probe and no outcome lifts it.
		if r := f.record(name, "w1", &pb.Ticket{Generation: r.State.Generation}, pb.Outcome_OUTCOME_SUCCESS); r.Counted || r.State.State != pb.State_STATE_PAUSED {
			t.Fatalf("a success on a paused breaker: counted %v, %v; want not counted, PAUSED", r.Counted, r.State.State)
		}
		if b.Mini != nil { // a real Redis's TTL runs on wall time
			if ttl := f.Client.PTTL(ctx, store.KeysOf(name).State).Val(); ttl != time.Hour+policy.Default().Retention() {
				t.Errorf("the paused state's TTL = %v, want the pause (1h) plus the retention", ttl)
			}
		}
		// A quarter of the pause before it lapses, the next call raises
		// pause_expiring; at its end it lapses by itself.
		f.Advance(45*time.Minute - time.Millisecond)
		f.allow(name, "w3")
		if n := count(f.kinds(name), "pause_expiring"); n != 0 {
			t.Fatalf("%d pause_expiring events before 45m, want 0", n)
		}
		f.Advance(time.Millisecond)
		f.allow(name, "w3")
		f.allow(name, "w3")
		if n := count(f.kinds(name), "pause_expiring"); n != 1 {
			t.Fatalf("%d pause_expiring events at 45m, want 1", n)
		}
		f.Advance(15 * time.Minute)
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("after the pause TTL: Allow = %v, want ALLOWED", a.Decision)
		}
		if k := f.kinds(name); k[len(k)-1] != "transition" {
			t.Fatalf("events %v, want the pause's lapse (a transition) last", k)
		}

		// An operator resumes a pause early with AUTO, or with Force
		// CLOSED and a TTL: when that lapses the breaker is fresh.
		f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		f.call(name, "w2", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		if st := f.get(name); st.State != pb.State_STATE_PAUSED {
			t.Fatalf("second pause: %v, want PAUSED", st.State)
		}
		if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_AUTO, "token rotated", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("after Force AUTO: Allow = %v, want ALLOWED", a.Decision)
		}
		f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		f.call(name, "w2", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_CLOSED, "rotating", time.Minute, "alice"); err != nil {
			t.Fatal(err)
		}
		f.Advance(time.Minute)
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED || a.State.State != pb.State_STATE_CLOSED {
			t.Fatalf("after a lapsed Force CLOSED: %v %v, want ALLOWED CLOSED", a.Decision, a.State.State)
		}
	})
}

func TestCredentialRevokedFromAStaleTicketDoesNotPause(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("github:token_8")
		old := f.allow(name, "w1").Ticket
		f.trip(name)
		// A 401 from a call admitted before the trip (the circuit is open).
		r := f.record(name, "w1", old, pb.Outcome_OUTCOME_UNAUTHENTICATED, func(r *pb.RecordRequest) { r.CredentialWorked = true })
		if r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("a stale 401: %v, want OPEN (alert only)", r.State.State)
		}
		if k := f.kinds(name); k[len(k)-1] != "credential_revoked" {
			t.Fatalf("events %v, want a credential_revoked alert last", k)
		}
	})
}

func TestProbeRejectedCredentialPausesInsteadOfReopening(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("github:token_9")
		worked := func(r *pb.RecordRequest) { r.CredentialWorked = true }
		// w1's credential was rejected before the trip (a lone vote).
		f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		for _, w := range []string{"w2", "w2", "w2", "w2", "w3"} {
			f.call(name, w, pb.Outcome_OUTCOME_TIMEOUT)
		}
		f.Advance(cooldown)
		a := f.allow(name, "w3")
		if a.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("Allow after the cooldown = %v, want PROBE", a.Decision)
		}
		r := f.record(name, "w3", a.Ticket, pb.Outcome_OUTCOME_UNAUTHENTICATED, worked)
		if r.State.State != pb.State_STATE_PAUSED || r.State.ProbeInFlight || r.State.NextProbeAtMs != 0 {
			t.Fatalf("the probe's 401: %v, probe in flight %v, next probe at %d; want PAUSED with no probe", r.State.State, r.State.ProbeInFlight, r.State.NextProbeAtMs)
		}
		ev := f.events(name)
		if last := ev[len(ev)-1]; last["kind"] != "credential_revoked" || last["from"] != "half_open" || last["to"] != "paused" {
			t.Fatalf("last event %v, want credential_revoked half_open -> paused", last)
		}
		f.Advance(time.Hour - time.Millisecond)
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_PAUSED {
			t.Fatalf("just under an hour later: Allow = %v, want DENIED_PAUSED (no probe lifts a pause)", a.Decision)
		}
	})
}

func TestAlertEventsDecodeFromTheLiveFeedAndTheLog(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ctx := context.Background()
		ps := b.Client.Subscribe(ctx, b.Prefix+"events")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		name := f.Breaker("web_search")
		for range 5 {
			f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		f.call(name, "w2", pb.Outcome_OUTCOME_UNAUTHENTICATED, func(r *pb.RecordRequest) { r.CredentialWorked = true })
		f.call(name, "w3", pb.Outcome_OUTCOME_UNAUTHENTICATED, func(r *pb.RecordRequest) { r.CredentialWorked = true })
		want := []struct {
			kind pb.EventKind
			to   pb.State
		}{{pb.EventKind_EVENT_KIND_SUSPECT_WORKER, pb.State_STATE_CLOSED}, {pb.EventKind_EVENT_KIND_CREDENTIAL_REVOKED, pb.State_STATE_CLOSED},
			{pb.EventKind_EVENT_KIND_CREDENTIAL_REVOKED, pb.State_STATE_PAUSED}}
		msgs, err := b.Client.XRange(ctx, store.EventsKey(name), "-", "+").Result()
		if err != nil || len(msgs) != len(want) {
			t.Fatalf("XRANGE = %d entries, %v; want %d", len(msgs), err, len(want))
		}
		for i, w := range want {
			var live *pb.Event
			for live == nil { // the feed also carries run notices, never logged
				m, err := ps.ReceiveMessage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				e, err := store.DecodeEvent([]byte(m.Payload))
				if err != nil {
					t.Fatalf("DecodeEvent: %v", err)
				}
				if !store.IsNotice(e) {
					live = e
				}
			}
			logged, err := store.EventFromStream(msgs[i])
			if err != nil {
				t.Fatalf("EventFromStream: %v", err)
			}
			for _, e := range []*pb.Event{live, logged} {
				if e.Kind != w.kind || e.To != w.to || e.Breaker != name || e.Id != msgs[i].ID {
					t.Errorf("event %d = %v, want %v to %v with id %s", i, e, w.kind, w.to, msgs[i].ID)
				}
			}
		}
	})
}

// A worker that lets 3 probe leases in a row lapse unsettled is reported
// (probe_abandoned) and refused probes for one base cooldown: one worker
// cannot hold a breaker half-open by taking the lease and never recording.
func TestLapsedProbeLeasesAreReported(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("search")
		f.trip(name)
		f.Advance(cooldown)
		probeTimeout := policy.Default().ProbeTimeout
		for i := range 3 {
			if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_PROBE {
				t.Fatalf("lease %d: Allow(w3) = %v, want PROBE", i+1, a.Decision)
			}
			f.Advance(probeTimeout) // w3 never records
		}
		if n := count(f.kinds(name), "probe_abandoned"); n != 0 {
			t.Fatalf("%d probe_abandoned events before the third lapse is seen, want 0", n)
		}
		a := f.allow(name, "w3")
		if a.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER || a.RetryAfterMs != cooldown.Milliseconds() ||
			!strings.Contains(a.Reason, "did not report them") {
			t.Fatalf("Allow(w3) after 3 lapses = %v retry %d %q; want DENIED_SUSPECT_WORKER for 30000 ms", a.Decision, a.RetryAfterMs, a.Reason)
		}
		ev := f.events(name)
		if last := ev[len(ev)-1]; last["kind"] != "probe_abandoned" || last["actor"] != "w3" {
			t.Fatalf("last event %v, want probe_abandoned by w3", last)
		}
		// Another worker takes the probe; w3 may probe again after the cooldown.
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("Allow(w1) = %v, want PROBE", a.Decision)
		}
		// A holder that settles ends its run of lapses: w1 lapses twice,
		// settles once (a neutral outcome), lapses twice more: no report.
		name2 := f.Breaker("search2")
		f.trip(name2)
		f.Advance(cooldown)
		for i := range 5 {
			p := f.allow(name2, "w1")
			if p.Decision != pb.Decision_DECISION_PROBE {
				t.Fatalf("search2 lease %d: %v, want PROBE", i+1, p.Decision)
			}
			if i == 2 {
				f.record(name2, "w1", p.Ticket, pb.Outcome_OUTCOME_INVALID_ARGUMENT)
				continue
			}
			f.Advance(probeTimeout)
		}
		if n := count(f.kinds(name2), "probe_abandoned"); n != 0 {
			t.Errorf("%d probe_abandoned events for a holder that settled in between, want 0", n)
		}
	})
}

// An exhausted quota (HTTP 402) is not the caller's mistake and not an
// outage: an alert, and a pause once two workers saw it, under the same
// rules as a rejected credential.
func TestQuotaExhaustedPausesUnderTheQuorum(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("openai:org_1")
		r := f.call(name, "w1", pb.Outcome_OUTCOME_QUOTA_EXHAUSTED)
		if r.Counted || r.State.State != pb.State_STATE_CLOSED || r.State.SuspectWorker != "w1" {
			t.Fatalf("one worker's 402: counted %v, %v, suspect %q; want not counted, CLOSED, w1 isolated", r.Counted, r.State.State, r.State.SuspectWorker)
		}
		r = f.call(name, "w2", pb.Outcome_OUTCOME_QUOTA_EXHAUSTED)
		if r.Counted || r.State.State != pb.State_STATE_PAUSED || !strings.Contains(r.State.Reason, "quota or billing is exhausted") {
			t.Fatalf("a second worker's 402: counted %v, %v %q; want PAUSED with the quota reason", r.Counted, r.State.State, r.State.Reason)
		}
		ev, err := store.EventFromStream(lastEntry(t, f, name))
		if err != nil || ev.Kind != pb.EventKind_EVENT_KIND_QUOTA_EXHAUSTED || ev.To != pb.State_STATE_PAUSED || ev.Actor != "w2" {
			t.Fatalf("last event %v (%v), want quota_exhausted -> paused by w2", ev, err)
		}
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_PAUSED {
			t.Fatalf("Allow on the paused breaker = %v, want DENIED_PAUSED", a.Decision)
		}
	})
}

func lastEntry(t *testing.T, f *fixture, name string) redis.XMessage {
	t.Helper()
	msgs, err := f.Client.XRevRangeN(context.Background(), store.KeysOf(name).Events, "+", "-", 1).Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("XREVRANGE: %v (%d entries)", err, len(msgs))
	}
	return msgs[0]
}

// TestFlappingVendorBacksOff: a vendor that passes each probe and fails
// again a moment later (2 s base cooldown, as reported) is kept out twice
// as long each time (2 s, 4 s, 8 s, 16 s), each re-trip raising one
// flapping alert that says so; its calls fall from one burst per 2 s to
// one per doubling period. Closed for two open periods without a trip, a
// breaker starts over at the base with no alert.
func TestFlappingVendorBacksOff(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("flaky")
		p := policy.Default()
		p.CooldownBase = 2 * time.Second
		f.st.SetPolicies(policy.NewSet(p))
		f.trip(name)
		probeOK := func() {
			t.Helper()
			f.Advance(time.Duration(f.get(name).CooldownMs) * time.Millisecond)
			a := f.allow(name, "w3")
			if r := f.record(name, "w3", a.Ticket, pb.Outcome_OUTCOME_SUCCESS); a.Decision != pb.Decision_DECISION_PROBE || r.State.State != pb.State_STATE_CLOSED {
				t.Fatalf("probe: %v, then %v; want PROBE, then CLOSED", a.Decision, r.State.State)
			}
		}
		for i, want := range []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second} {
			probeOK()
			f.Advance(400 * time.Millisecond) // the vendor fails again at once
			f.trip(name)
			st := f.get(name)
			if st.CooldownMs != want.Milliseconds() || st.FailedProbes != int64(i+1) || st.NextProbeAtMs-st.OpenedAtMs != want.Milliseconds() {
				t.Errorf("re-trip %d: cooldown %dms level %d next probe in %dms; want %dms, level %d", i+1,
					st.CooldownMs, st.FailedProbes, st.NextProbeAtMs-st.OpenedAtMs, want.Milliseconds(), i+1)
			}
			ev := f.events(name)
			last := ev[len(ev)-1]
			if last["kind"] != "flapping" || last["cooldown_ms"] != strconv.FormatInt(want.Milliseconds(), 10) || last["gen"] != strconv.FormatInt(st.Generation, 10) {
				t.Fatalf("re-trip %d: last event %v, want flapping with cooldown %dms at gen %d", i+1, last, want.Milliseconds(), st.Generation)
			}
			if r := last["reason"].(string); !strings.Contains(r, "flapping") || !strings.Contains(r, "grows to "+breaker.Human(want)) {
				t.Errorf("re-trip %d: flapping reason %q does not say the cooldown grew to %s", i+1, r, breaker.Human(want))
			}
		}
		if n := count(f.kinds(name), "flapping"); n != 3 {
			t.Errorf("%d flapping events after 3 re-trips, want 3", n)
		}

		// Closed for two open periods (2 × 16 s): the base again, no alert.
		probeOK()
		f.Advance(32 * time.Second)
		f.trip(name)
		if st := f.get(name); st.CooldownMs != 2000 || st.FailedProbes != 0 {
			t.Errorf("trip after 32 s closed: cooldown %dms level %d, want the base 2000ms at level 0", st.CooldownMs, st.FailedProbes)
		}
		if n := count(f.kinds(name), "flapping"); n != 3 {
			t.Errorf("%d flapping events after a trip past the kept backoff, want still 3", n)
		}
	})
}
