package scope_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/scope"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The behaviour of parent scopes: the vendor host search-vendor is the
// parent of the tools web_search and news_search. Each test runs two
// daemons (a store, an events hub and Scopes each, on their own Redis
// connections) on miniredis, the real Redis and the Cluster; on the
// Cluster the parent and its children are in different slots.

const (
	fail = pb.Outcome_OUTCOME_SERVER_ERROR
	ok   = pb.Outcome_OUTCOME_SUCCESS
)

// names are one test's breakers.
type names struct{ parent, web, news string }

// policies is the policy file the tests use: the parent trips on 2
// consecutive failures from 2 workers with a 10s cooldown and a 5s probe
// lease; the children alone would need 5 (so every trip here is the
// parent's), and count toward the parent unless count is false.
func policies(t *testing.T, n names, count bool, child string) *policy.Set {
	t.Helper()
	if child == "" {
		child = "threshold: 5"
	}
	yaml := fmt.Sprintf(`
defaults:
  jitter: 0
breakers:
  - match: %q
    threshold: 2
    min_workers: 2
    cooldown_base: 10s
    cooldown_cap: 80s
    probe_timeout: 5s
  - match: %q
    parent: %q
    count_toward_parent: %t
    %s
  - match: %q
    parent: %q
    count_toward_parent: %t
    %s
`, n.parent, n.web, n.parent, count, child, n.news, n.parent, count, child)
	set, err := policy.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return set
}

// daemon is one breakerd daemon's store, hub and scopes.
type daemon struct {
	t   *testing.T
	st  *store.Store
	sc  *scope.Scopes
	hub *events.Hub
}

func newDaemon(t *testing.T, b *testredis.Backend, set *policy.Set) *daemon {
	t.Helper()
	client := b.NewClient(t)
	st := store.New(client, store.Options{Policies: set, Now: b.Clock(), Rand: func() float64 { return 0 },
		Channel: b.Prefix + "events"})
	if err := st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	hub := events.NewHub(client, st.Channel(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop, err := hub.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return &daemon{t: t, st: st, sc: scope.New(st, hub, slog.New(slog.NewTextHandler(io.Discard, nil))), hub: hub}
}

func (d *daemon) allow(name, worker string) *pb.AllowResponse {
	d.t.Helper()
	res, err := d.sc.Allow(context.Background(), name, worker)
	if err != nil {
		d.t.Fatalf("Allow(%q, %q): %v", name, worker, err)
	}
	return res
}

func (d *daemon) record(name, worker string, ticket *pb.Ticket, outcome pb.Outcome) *pb.RecordResponse {
	d.t.Helper()
	in, err := store.NewRecordInput(&pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: ticket,
		Outcome: outcome, LatencyMs: 100}, d.st.Policies(), d.st.Now())
	if err != nil {
		d.t.Fatalf("NewRecordInput(%q, %q, %v): %v", name, worker, outcome, err)
	}
	res, err := d.sc.Record(context.Background(), in)
	if err != nil {
		d.t.Fatalf("Record(%q, %q, %v): %v", name, worker, outcome, err)
	}
	return res
}

func (d *daemon) get(name string) *pb.BreakerState {
	d.t.Helper()
	st, err := d.st.Get(context.Background(), name)
	if err != nil {
		d.t.Fatalf("Get(%q): %v", name, err)
	}
	return st
}

// dependency is the fake vendor: it counts the calls that reach it.
type dependency struct{ calls atomic.Int64 }

// call asks d's Allow and, when the call is let through, makes it (the
// vendor answers outcome) and records it.
func (dep *dependency) call(d *daemon, name, worker string, outcome pb.Outcome) *pb.AllowResponse {
	d.t.Helper()
	a := d.allow(name, worker)
	if a.Decision == pb.Decision_DECISION_ALLOWED || a.Decision == pb.Decision_DECISION_PROBE {
		dep.calls.Add(1)
		d.record(name, worker, a.Ticket, outcome)
	}
	return a
}

// waitHeard waits until d's view of parent has been marked stale past
// before (an event about the parent reached d).
func (d *daemon) waitHeard(parent string, before uint64) {
	d.t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound for a failing run only
	for d.sc.Heard(parent) <= before {
		if time.Now().After(deadline) {
			d.t.Fatalf("the parent's event never reached the daemon's view")
		}
		time.Sleep(time.Millisecond)
	}
}

// setup returns the test's names and checks that on a Cluster the parent
// and each child hash to different slots (so no one script could read
// both: the verdict must cross as an argument).
func setup(t *testing.T, b *testredis.Backend) names {
	t.Helper()
	n := names{parent: b.Breaker("search-vendor"), web: b.Breaker("web_search"), news: b.Breaker("news_search")}
	if b.Name == "cluster" {
		slot := func(name string) int64 {
			s, err := b.Client.ClusterKeySlot(context.Background(), store.KeysOf(name).State).Result()
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		if p := slot(n.parent); p == slot(n.web) || p == slot(n.news) {
			t.Fatalf("the parent and a child share slot %d: the test would not cross slots", p)
		}
	}
	return n
}

// An open parent denies both children, on every daemon, with the
// parent's reason, scope and retry_after, and no call reaches the vendor;
// the children's own states are untouched. Their failures from two
// workers (one alone is not a quorum) are what tripped the parent.
func TestOpenParentDeniesEveryChild(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		set := policies(t, n, true, "")
		a, c := newDaemon(t, b, set), newDaemon(t, b, set)
		var dep dependency

		// w1 alone fails on both children: 2 failures toward the parent,
		// from one worker: no quorum, the parent stays closed.
		dep.call(a, n.web, "w1", fail)
		dep.call(c, n.news, "w1", fail)
		if p := a.get(n.parent); p.State != pb.State_STATE_CLOSED || p.Failures != 2 || p.DistinctWorkers != 1 {
			t.Fatalf("parent after w1's 2 failures: %v, %d failures from %d workers; want CLOSED, 2 from 1",
				p.State, p.Failures, p.DistinctWorkers)
		}
		heardA, heardC := a.sc.Heard(n.parent), c.sc.Heard(n.parent)
		dep.call(c, n.news, "w2", fail)
		p := a.get(n.parent)
		if p.State != pb.State_STATE_OPEN || p.DistinctWorkers != 2 {
			t.Fatalf("parent after w2's failure: %v from %d workers; want OPEN from 2", p.State, p.DistinctWorkers)
		}
		a.waitHeard(n.parent, heardA)
		c.waitHeard(n.parent, heardC)

		before := dep.calls.Load()
		wantReason := "it is failing: 3 failed calls in a row, last: server error (5xx)" // the parent's words, no name
		if got := p.GetDenial().GetReason(); got != wantReason {
			t.Fatalf("the parent's denial says %q, want %q", got, wantReason)
		}
		for _, d := range []*daemon{a, c} {
			for _, child := range []string{n.web, n.news} {
				for _, w := range []string{"w1", "w2", "w3"} {
					r := dep.call(d, child, w, ok)
					if r.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || r.Scope != n.parent ||
						r.Reason != wantReason || r.RetryAfterMs != 10000 || r.GetDenial().GetReason() != wantReason ||
						r.GetDenial().GetStatus() != "parent_open" || r.GetDenial().GetScope() != pb.DenialScope_DENIAL_SCOPE_PARENT {
						t.Fatalf("Allow(%s, %s) = %v scope %q reason %q retry %dms; want DENIED_PARENT_OPEN by %q, %q, 10000ms",
							child, w, r.Decision, r.Scope, r.Reason, r.RetryAfterMs, n.parent, wantReason)
					}
				}
			}
		}
		if got := dep.calls.Load() - before; got != 0 {
			t.Fatalf("%d calls reached the vendor while its parent scope was open, want 0", got)
		}
		// The children's own states: closed, their own failures kept.
		if w := a.get(n.web); w.State != pb.State_STATE_CLOSED || w.Failures != 1 {
			t.Errorf("web_search: %v with %d failures, want CLOSED with its own 1", w.State, w.Failures)
		}
		if w := a.get(n.news); w.State != pb.State_STATE_CLOSED || w.Failures != 2 {
			t.Errorf("news_search: %v with %d failures, want CLOSED with its own 2", w.State, w.Failures)
		}
	})
}

// tripParent opens the parent through its children (w1 and w2 fail) and
// waits until both daemons have heard it.
func tripParent(t *testing.T, n names, a, c *daemon, dep *dependency) {
	t.Helper()
	heardA, heardC := a.sc.Heard(n.parent), c.sc.Heard(n.parent)
	dep.call(a, n.web, "w1", fail)
	dep.call(c, n.news, "w2", fail)
	if p := a.get(n.parent); p.State != pb.State_STATE_OPEN {
		t.Fatalf("parent after 2 failures from 2 workers: %v, want OPEN", p.State)
	}
	a.waitHeard(n.parent, heardA)
	c.waitHeard(n.parent, heardC)
}

// Once the parent's cooldown has elapsed, exactly one call fleet-wide,
// through either child on either daemon, is the parent's probe; every
// other is denied with the parent's probe in flight. A probe that never
// records lapses after the parent's probe_timeout and the next call takes
// the probe; a failed probe reopens the parent with a doubled cooldown,
// and a successful one closes it for every child.
func TestParentProbeIsOneFleetWide(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		set := policies(t, n, true, "")
		a, c := newDaemon(t, b, set), newDaemon(t, b, set)
		var dep dependency
		tripParent(t, n, a, c, &dep)
		b.Advance(10 * time.Second)

		var wg sync.WaitGroup
		var mu sync.Mutex
		var through []*pb.AllowResponse
		var denied atomic.Int64
		for i := range 16 {
			d, child := []*daemon{a, c}[i%2], []string{n.web, n.news}[i/2%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := d.sc.Allow(context.Background(), child, fmt.Sprintf("w%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				switch res.Decision {
				case pb.Decision_DECISION_ALLOWED, pb.Decision_DECISION_PROBE:
					mu.Lock()
					through = append(through, res)
					mu.Unlock()
				case pb.Decision_DECISION_DENIED_PARENT_OPEN:
					if res.Scope == n.parent {
						denied.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if len(through) != 1 || denied.Load() != 15 {
			t.Fatalf("%d calls let through and %d denied by the parent; want exactly 1 probe and 15 denied", len(through), denied.Load())
		}
		if through[0].Ticket.GetParentLeaseToken() == "" {
			t.Fatalf("the parent's probe carries no parent lease in its ticket: %v", through[0].Ticket)
		}
		if p := a.get(n.parent); p.State != pb.State_STATE_HALF_OPEN || !p.ProbeInFlight {
			t.Fatalf("parent: %v in flight %v, want HALF_OPEN with its probe in flight", p.State, p.ProbeInFlight)
		}

		// The probe never records: after the parent's probe_timeout the
		// next call through a child is the probe.
		b.Advance(5 * time.Second)
		probe := a.allow(n.news, "w20")
		if probe.Ticket.GetParentLeaseToken() == "" || probe.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("after the lease lapsed: %v ticket %v; want ALLOWED carrying the parent's lease", probe.Decision, probe.Ticket)
		}
		if r := c.allow(n.web, "w21"); r.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || r.Scope != n.parent {
			t.Fatalf("during the new probe: %v scope %q, want DENIED_PARENT_OPEN by the parent", r.Decision, r.Scope)
		}
		// The probe fails: the parent reopens, its cooldown doubled.
		a.record(n.news, "w20", probe.Ticket, fail)
		if p := a.get(n.parent); p.State != pb.State_STATE_OPEN || p.CooldownMs != 20000 || p.FailedProbes != 1 {
			t.Fatalf("after the failed probe: %v cooldown %dms failed probes %d; want OPEN 20000ms 1", p.State, p.CooldownMs, p.FailedProbes)
		}
		// Whether or not c has heard of the reopen yet, the reopened
		// parent's end (its next probe) is judged on the fleet's clock.
		b.Advance(20 * time.Second)
		probe = c.allow(n.web, "w22")
		if probe.Ticket.GetParentLeaseToken() == "" {
			t.Fatalf("after the second cooldown: %v ticket %v; want the parent's probe", probe.Decision, probe.Ticket)
		}
		heardA := a.sc.Heard(n.parent)
		c.record(n.web, "w22", probe.Ticket, ok)
		if p := a.get(n.parent); p.State != pb.State_STATE_CLOSED {
			t.Fatalf("after the successful probe: parent %v, want CLOSED", p.State)
		}
		a.waitHeard(n.parent, heardA)
		before := dep.calls.Load()
		for _, d := range []*daemon{a, c} {
			for _, child := range []string{n.web, n.news} {
				if r := dep.call(d, child, "w30", ok); r.Decision != pb.Decision_DECISION_ALLOWED || r.Scope != "" {
					t.Fatalf("after the parent closed: Allow(%s) = %v scope %q, want ALLOWED", child, r.Decision, r.Scope)
				}
			}
		}
		if got := dep.calls.Load() - before; got != 4 {
			t.Fatalf("%d calls reached the vendor after the parent closed, want 4", got)
		}
	})
}

// A child that denies the call holding the parent's probe lease (it is
// open itself) releases the lease at once: the next call, through the
// other child, is the parent's probe, without waiting out the lease. (The
// parent is a breaker in its own right: w2 calls it directly here.)
func TestChildDenialReleasesTheParentsProbe(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		set := policies(t, n, true, "threshold: 1\n    min_workers: 1\n    cooldown_base: 60s")
		a := newDaemon(t, b, set)
		var dep dependency
		dep.call(a, n.web, "w1", fail)    // web_search opens (threshold 1); the parent counts 1
		dep.call(a, n.parent, "w2", fail) // a direct call: the parent opens (2 from 2 workers)
		if p, w := a.get(n.parent), a.get(n.web); p.State != pb.State_STATE_OPEN || w.State != pb.State_STATE_OPEN {
			t.Fatalf("parent %v, web_search %v; want both OPEN", p.State, w.State)
		}
		// a learned of the direct trip only from its events: the parent's
		// run_started notice, then its trip (one node publishes both, in
		// order). Until the trip's event arrives a's view may still hold
		// the parent closed (the staleness bound).
		a.waitHeard(n.parent, 1)
		b.Advance(10 * time.Second) // the parent's cooldown, not web_search's
		r := a.allow(n.web, "w3")
		if r.Decision != pb.Decision_DECISION_DENIED_OPEN || r.Scope != "" {
			t.Fatalf("web_search (open itself) = %v scope %q, want its own DENIED_OPEN", r.Decision, r.Scope)
		}
		if p := a.get(n.parent); p.State != pb.State_STATE_HALF_OPEN || p.ProbeInFlight {
			t.Fatalf("parent after the released lease: %v in flight %v, want HALF_OPEN with no probe in flight", p.State, p.ProbeInFlight)
		}
		probe := a.allow(n.news, "w4")
		if probe.Decision != pb.Decision_DECISION_ALLOWED || probe.Ticket.GetParentLeaseToken() == "" {
			t.Fatalf("news_search = %v ticket %v, want ALLOWED as the parent's probe", probe.Decision, probe.Ticket)
		}
		a.record(n.news, "w4", probe.Ticket, ok)
		if p := a.get(n.parent); p.State != pb.State_STATE_CLOSED {
			t.Fatalf("after news_search's successful probe: parent %v, want CLOSED", p.State)
		}
	})
}

// With count_toward_parent false, the children's outcomes never reach
// the parent: it holds no state at all.
func TestCountTowardParentOff(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		a := newDaemon(t, b, policies(t, n, false, ""))
		var dep dependency
		for _, w := range []string{"w1", "w2", "w3"} {
			dep.call(a, n.web, w, fail)
			dep.call(a, n.news, w, fail)
		}
		n0, err := b.Client.Exists(context.Background(), store.KeysOf(n.parent).State).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n0 != 0 {
			t.Fatalf("the parent holds state (%v) though its children do not count toward it", a.get(n.parent))
		}
		if dep.calls.Load() != 6 {
			t.Fatalf("%d calls reached the vendor, want 6", dep.calls.Load())
		}
	})
}

// A success through one child ends the parent's failure run that a
// failure through the other started; a success on a healthy parent costs
// no script on it (one round trip for the pair's Record).
func TestChildSuccessEndsTheParentsRun(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		a := newDaemon(t, b, policies(t, n, true, ""))
		var dep dependency
		heard := a.sc.Heard(n.parent)
		dep.call(a, n.web, "w1", fail)
		if p := a.get(n.parent); p.Failures != 1 {
			t.Fatalf("parent failures %d, want 1", p.Failures)
		}
		a.waitHeard(n.parent, heard) // the parent's run_started notice
		heard = a.sc.Heard(n.parent)
		dep.call(a, n.news, "w2", ok)
		if p := a.get(n.parent); p.Failures != 0 {
			t.Fatalf("parent failures %d after a success through news_search, want 0", p.Failures)
		}
		a.waitHeard(n.parent, heard) // its run_ended notice: the next Allow reads the parent again
		a.allow(n.news, "w2")
		// Both healthy now, the view holding the parent: a pair is one
		// script each, on the child only.
		b.ResetCounts()
		r := a.allow(n.news, "w2")
		if got := b.RoundTrips(); got != 1 {
			t.Fatalf("an Allow on a healthy child took %d round trips, want 1 (the child's script)", got)
		}
		b.ResetCounts()
		a.record(n.news, "w2", r.Ticket, ok)
		if got := b.RoundTrips(); got != 1 {
			t.Fatalf("a success on a healthy pair took %d round trips, want 1 (the child's script)", got)
		}
	})
}

// When the hub's feed is lost (its Redis connection dropped and came
// back: events.ErrFeedLost), what the parent did meanwhile never reached
// the view: the view is dropped and the next Allow reads the parent again.
// (A proxy fronts the hub's connection: miniredis and the real Redis.)
func TestLostFeedDropsTheView(t *testing.T) {
	for _, server := range []struct {
		name string
		open func(testing.TB) *testredis.Backend
	}{{"miniredis", testredis.Mini}, {"redis", testredis.Real}} {
		t.Run(server.name, func(t *testing.T) {
			b := server.open(t)
			n := setup(t, b)
			set := policies(t, n, true, "")
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			proxy := testredis.NewProxy(t, b.Addr)
			st := store.New(b.NewClient(t), store.Options{Policies: set, Now: b.Clock(), Rand: func() float64 { return 0 },
				Channel: b.Prefix + "events"})
			hub := events.NewHub(b.ClientVia(t, proxy.Addr(), nil), st.Channel(), quiet)
			stop, err := hub.Start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			d := &daemon{t: t, st: st, sc: scope.New(st, hub, quiet)}
			if r := d.allow(n.web, "w1"); r.Decision != pb.Decision_DECISION_ALLOWED {
				t.Fatalf("Allow = %v, want ALLOWED (the view now holds the parent closed)", r.Decision)
			}
			heard := d.sc.Heard(n.parent)
			proxy.Cut()
			// Forced open while the hub is away: no event reaches the view.
			if _, err := st.Force(context.Background(), n.parent, pb.ForceMode_FORCE_MODE_OPEN, "vendor outage", 0, "ops"); err != nil {
				t.Fatal(err)
			}
			proxy.Restore(t)
			d.waitHeard(n.parent, heard) // the feed came back: the view was dropped
			r := d.allow(n.web, "w1")
			if r.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || r.Scope != n.parent ||
				r.Reason != "forced open by an operator: vendor outage" || r.RetryAfterMs != 0 || !r.GetDenial().GetForced() {
				t.Fatalf("after the lost feed: %v scope %q reason %q retry %d; want DENIED_PARENT_OPEN by the parent, its operator's reason, 0",
					r.Decision, r.Scope, r.Reason, r.RetryAfterMs)
			}
		})
	}
}

// A paused parent (its credential refused by two workers) denies its
// children with its reason until its pause lapses; then the parent's own
// script ends the pause and the children are let through again, without
// an event telling the view.
func TestPausedParentLapses(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		a := newDaemon(t, b, policies(t, n, true, ""))
		if r := a.allow(n.web, "w1"); r.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow = %v, want ALLOWED", r.Decision)
		}
		heard := a.sc.Heard(n.parent)
		for _, w := range []string{"w1", "w2"} { // direct calls on the parent: 401 on a credential that worked
			r := a.allow(n.parent, w)
			if _, err := a.st.Record(context.Background(), &pb.RecordRequest{Breaker: n.parent, WorkerId: w, Ticket: r.Ticket,
				Outcome: pb.Outcome_OUTCOME_UNAUTHENTICATED, CredentialWorked: true}); err != nil {
				t.Fatal(err)
			}
		}
		p := a.get(n.parent)
		if p.State != pb.State_STATE_PAUSED || p.PausedUntilMs != p.AsOfMs+time.Hour.Milliseconds() {
			t.Fatalf("parent %v paused until %d (as of %d), want PAUSED for 1h", p.State, p.PausedUntilMs, p.AsOfMs)
		}
		a.waitHeard(n.parent, heard)
		r := a.allow(n.news, "w3")
		if r.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || r.Scope != n.parent || r.Reason != p.GetDenial().GetReason() ||
			r.RetryAfterMs != time.Hour.Milliseconds() || r.GetDenial().GetMayReturnAtMs() != p.PausedUntilMs {
			t.Fatalf("Allow on a child of a paused parent = %v scope %q reason %q retry %d, denial %v; want DENIED_PARENT_OPEN, %q, 1h",
				r.Decision, r.Scope, r.Reason, r.RetryAfterMs, r.GetDenial(), p.GetDenial().GetReason())
		}
		b.Advance(time.Hour)
		if r := a.allow(n.news, "w3"); r.Decision != pb.Decision_DECISION_ALLOWED || r.Scope != "" {
			t.Fatalf("after the pause lapsed: %v scope %q, want ALLOWED", r.Decision, r.Scope)
		}
		if p := a.get(n.parent); p.State != pb.State_STATE_CLOSED {
			t.Fatalf("parent %v after its pause lapsed, want CLOSED", p.State)
		}
	})
}

// Until the hub's first subscription is confirmed, an event could be
// missed with no ErrFeedLost to say so: the view keeps nothing, and every
// child's Allow reads its parent (two scripts) and sees it as it is.
func TestNoViewBeforeTheFeedIsLive(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		client := b.NewClient(t)
		st := store.New(client, store.Options{Policies: policies(t, n, true, ""), Now: b.Clock(), Channel: b.Prefix + "events"})
		if err := st.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		hub := events.NewHub(client, st.Channel(), quiet) // never run
		d := &daemon{t: t, st: st, sc: scope.New(st, hub, quiet)}
		for range 2 {
			b.ResetCounts()
			if r := d.allow(n.web, "w1"); r.Decision != pb.Decision_DECISION_ALLOWED {
				t.Fatalf("Allow = %v, want ALLOWED", r.Decision)
			}
			if got := b.RoundTrips(); got != 2 {
				t.Fatalf("an Allow on a child with no live feed took %d round trips, want 2 (the parent read, the child's script)", got)
			}
		}
		if _, err := st.Force(context.Background(), n.parent, pb.ForceMode_FORCE_MODE_OPEN, "vendor outage", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		if r := d.allow(n.web, "w1"); r.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN {
			t.Fatalf("Allow after the parent was forced open (no event heard) = %v, want DENIED_PARENT_OPEN", r.Decision)
		}
	})
}

// The parent's half of a Record is a second script, fenced by the
// parent's generation the child's Allow saw: a call admitted before the
// parent moved (here an operator's Force and AUTO in between) counts on
// the child and not on the parent.
func TestParentHalfIsFencedByItsGeneration(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		a := newDaemon(t, b, policies(t, n, true, ""))
		r := a.allow(n.web, "w1")
		if r.Decision != pb.Decision_DECISION_ALLOWED || r.Ticket.GetParentGeneration() != 0 {
			t.Fatalf("Allow = %v ticket %v, want ALLOWED with the parent's generation 0", r.Decision, r.Ticket)
		}
		for _, m := range []pb.ForceMode{pb.ForceMode_FORCE_MODE_OPEN, pb.ForceMode_FORCE_MODE_AUTO} {
			if _, err := a.st.Force(context.Background(), n.parent, m, "maintenance", 0, "ops"); err != nil {
				t.Fatal(err)
			}
		}
		a.record(n.web, "w1", r.Ticket, fail)
		if w := a.get(n.web); w.Failures != 1 {
			t.Fatalf("web_search failures %d, want 1", w.Failures)
		}
		if p := a.get(n.parent); p.Failures != 0 || p.Generation != 2 {
			t.Fatalf("parent at generation %d with %d failures; want generation 2 and the stale failure not counted", p.Generation, p.Failures)
		}
	})
}

// A parent whose keys lapse after a quiet close (its retention) starts
// again at generation 0 with no event: the first outcome sent to it after
// that is fenced out as stale, the daemon learns the parent's answer, and
// the next outcome counts. (Key lifetimes move only on miniredis.)
func TestLapsedParentRelearned(t *testing.T) {
	b := testredis.Mini(t)
	n := setup(t, b)
	a := newDaemon(t, b, policies(t, n, true, ""))
	a.allow(n.web, "w0") // the view holds the parent from here on
	heard := a.sc.Heard(n.parent)
	for _, m := range []pb.ForceMode{pb.ForceMode_FORCE_MODE_OPEN, pb.ForceMode_FORCE_MODE_AUTO} {
		if _, err := a.st.Force(context.Background(), n.parent, m, "maintenance", 0, "ops"); err != nil {
			t.Fatal(err)
		}
	}
	a.waitHeard(n.parent, heard+1) // both Forces' events
	r := a.allow(n.web, "w1")
	if r.Ticket.GetParentGeneration() != 2 {
		t.Fatalf("ticket %v, want the parent's generation 2", r.Ticket)
	}
	b.Advance(86 * time.Second) // past the parent's retention (80s cap + 5s probe timeout)
	if n, _ := b.Client.Exists(context.Background(), store.KeysOf(n.parent).State).Result(); n != 0 {
		t.Fatal("the parent's keys did not lapse")
	}
	r = a.allow(n.web, "w1")
	if r.Ticket.GetParentGeneration() != 2 {
		t.Fatalf("ticket %v: the view was expected to still hold generation 2 (no event said otherwise)", r.Ticket)
	}
	a.record(n.web, "w1", r.Ticket, fail)
	if p := a.get(n.parent); p.Failures != 0 {
		t.Fatalf("parent failures %d, want 0: the outcome carried a lapsed generation", p.Failures)
	}
	r = a.allow(n.web, "w2")
	if r.Ticket.GetParentGeneration() != 0 {
		t.Fatalf("ticket %v, want the parent's generation 0, learned from its answer", r.Ticket)
	}
	a.record(n.web, "w2", r.Ticket, fail)
	if p := a.get(n.parent); p.Failures != 1 {
		t.Fatalf("parent failures %d, want 1", p.Failures)
	}
}

// Shadow mode and parents: a child in shadow mode is still denied by its
// open parent (the parent's decision, enforced); a parent in shadow mode
// denies no child (its enforced state is closed).
func TestParentAndShadowMode(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		a := newDaemon(t, b, policies(t, n, true, "shadow: true"))
		var dep dependency
		tripParent(t, n, a, a, &dep)
		r := a.allow(n.web, "w3")
		if r.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || r.Scope != n.parent || r.ShadowDecision != pb.Decision_DECISION_UNSPECIFIED {
			t.Fatalf("a shadowed child of an open parent: %v scope %q shadow %v; want DENIED_PARENT_OPEN, enforced", r.Decision, r.Scope, r.ShadowDecision)
		}

		m := names{parent: b.Breaker("shadow-vendor"), web: b.Breaker("shadow_web"), news: b.Breaker("shadow_news")}
		set, err := policy.Parse([]byte(fmt.Sprintf(`
defaults:
  jitter: 0
breakers:
  - match: %q
    threshold: 2
    min_workers: 2
    shadow: true
  - match: %q
    parent: %q
  - match: %q
    parent: %q
`, m.parent, m.web, m.parent, m.news, m.parent)))
		if err != nil {
			t.Fatal(err)
		}
		c := newDaemon(t, b, set)
		heard := c.sc.Heard(m.parent)
		dep.call(c, m.web, "w1", fail)
		dep.call(c, m.news, "w2", fail)
		if p := c.get(m.parent); !p.Shadow || p.ShadowState != pb.State_STATE_OPEN || p.State != pb.State_STATE_CLOSED {
			t.Fatalf("shadowed parent: state %v shadow %v %v; want CLOSED enforced, shadow OPEN", p.State, p.Shadow, p.ShadowState)
		}
		c.waitHeard(m.parent, heard)
		if r := c.allow(m.news, "w3"); r.Decision != pb.Decision_DECISION_ALLOWED || r.Scope != "" {
			t.Fatalf("a child of a shadow-open parent: %v scope %q, want ALLOWED", r.Decision, r.Scope)
		}
	})
}

// What a child's state reports: while its parent is open, a closed
// child's deny_until_ms is the parent's next probe (the read rule with the
// parent's verdict), so a cache of any language denies it with no rule of
// its own; once the parent's probe is due, the child's own verdict again.
func TestChildStateCarriesTheParentsDenial(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		set := policies(t, n, true, "")
		a, c := newDaemon(t, b, set), newDaemon(t, b, set)
		var dep dependency
		tripParent(t, n, a, c, &dep)
		p := a.get(n.parent)
		states := []*pb.BreakerState{a.get(n.web), a.get(n.news)}
		if states[0].GetDenyUntilMs() != 0 {
			t.Fatalf("web_search alone: deny_until_ms %d, want 0 (its own state is closed)", states[0].GetDenyUntilMs())
		}
		a.sc.WithParents(context.Background(), states)
		for _, st := range states {
			if st.GetState() != pb.State_STATE_CLOSED || st.GetDenyUntilMs() != p.GetNextProbeAtMs() {
				t.Errorf("%s: %v, deny_until_ms %d; want CLOSED, denied until the parent's next probe %d",
					st.GetBreaker(), st.GetState(), st.GetDenyUntilMs(), p.GetNextProbeAtMs())
			}
		}
		b.Advance(10 * time.Second) // the parent's cooldown: its probe is due
		st := []*pb.BreakerState{a.get(n.web)}
		a.sc.WithParents(context.Background(), st)
		if st[0].GetDenyUntilMs() != 0 {
			t.Errorf("web_search once the parent's probe is due: deny_until_ms %d, want 0", st[0].GetDenyUntilMs())
		}
	})
}

// TestStatelessChildIsReadOnItsParentsClock: a child that holds no state
// (no clock of its own) under an open parent carries the parent's denial
// (scope parent, parent_open, the parent's words and return time) and
// the clock it was judged at, from one read of the parent for all such
// children of an answer, even while the view holds the parent; once the
// parent's probe is due (no event says so: only the clock) it carries
// none; while the parent's probe is in flight, the parent's. A parent
// forced open with no end needs no clock: the view answers, with no read.
func TestStatelessChildIsReadOnItsParentsClock(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		n := setup(t, b)
		a := newDaemon(t, b, policies(t, n, true, ""))
		ctx := context.Background()
		select {
		case <-a.hub.Live(): // the view keeps what it reads from now on
		case <-time.After(time.Minute): // a bound for a failing run only
			t.Fatal("the events feed never went live")
		}
		heard := a.sc.Heard(n.parent)
		a.sc.WithParents(ctx, []*pb.BreakerState{a.get(n.web)}) // the parent, closed, is in the view
		for _, w := range []string{"w1", "w2"} {
			a.record(n.parent, w, a.allow(n.parent, w).GetTicket(), fail)
		}
		a.waitHeard(n.parent, heard)
		p := a.get(n.parent)
		children := func() []*pb.BreakerState {
			st := []*pb.BreakerState{a.get(n.web), a.get(n.news)}
			if st[0].GetAsOfMs() != 0 || st[1].GetAsOfMs() != 0 {
				t.Fatalf("children hold state: %v", st)
			}
			return st
		}
		parentOpen := func(what string, st *pb.BreakerState, reason string, back int64) {
			t.Helper()
			d := st.GetDenial()
			if d.GetDecision() != pb.Decision_DECISION_DENIED_PARENT_OPEN || d.GetScope() != pb.DenialScope_DENIAL_SCOPE_PARENT ||
				d.GetStatus() != "parent_open" || d.GetReason() != reason || d.GetMayReturnAtMs() != back || st.GetSuspectDenial() != nil {
				t.Errorf("%s: %s's denial %v; want the parent's (%q, back at %d)", what, st.GetBreaker(), d, reason, back)
			}
		}
		for i := range 2 { // the first answer reads the parent into the view; the second finds it there
			st := children()
			b.ResetCounts()
			a.sc.WithParents(ctx, st)
			if trips := b.RoundTrips(); trips != 1 {
				t.Errorf("answer %d: %d round trips to Redis, want 1 (the parent, read once for both children)", i, trips)
			}
			for _, c := range st {
				parentOpen("open parent", c, p.GetDenial().GetReason(), p.GetNextProbeAtMs())
				if c.GetDenyUntilMs() != p.GetNextProbeAtMs() || c.GetAsOfMs() < p.GetAsOfMs() {
					t.Errorf("%s: deny_until_ms %d at %d; want the parent's next probe %d, read at its clock",
						c.GetBreaker(), c.GetDenyUntilMs(), c.GetAsOfMs(), p.GetNextProbeAtMs())
				}
			}
		}

		b.Advance(10 * time.Second) // the parent's cooldown: its probe is due
		st := children()
		a.sc.WithParents(ctx, st)
		for _, c := range st {
			if c.GetDenial() != nil || c.GetDenyUntilMs() != 0 {
				t.Errorf("%s with the parent's probe due: denial %v, deny_until_ms %d; want none (a call finds out)",
					c.GetBreaker(), c.GetDenial(), c.GetDenyUntilMs())
			}
		}

		heard = a.sc.Heard(n.parent)
		if pr := a.allow(n.parent, "w1"); pr.GetDecision() != pb.Decision_DECISION_PROBE {
			t.Fatalf("the parent after its cooldown: %v, want PROBE", pr.GetDecision())
		}
		a.waitHeard(n.parent, heard)
		st = children()
		a.sc.WithParents(ctx, st)
		parentOpen("parent probed", st[0], "it failed and is being tested with a single call; its recovery is not confirmed yet", 0)

		heard = a.sc.Heard(n.parent)
		if _, err := a.st.Force(ctx, n.parent, pb.ForceMode_FORCE_MODE_OPEN, "vendor outage", 0, "op"); err != nil {
			t.Fatal(err)
		}
		a.waitHeard(n.parent, heard)
		a.sc.WithParents(ctx, children()) // reads the forced parent into the view
		st = children()
		b.ResetCounts()
		a.sc.WithParents(ctx, st)
		if trips := b.RoundTrips(); trips != 0 {
			t.Errorf("a parent forced open with no end: %d round trips, want 0 (no clock needed)", trips)
		}
		parentOpen("forced parent", st[0], "forced open by an operator: vendor outage", 0)
		if !st[0].GetDenial().GetForced() {
			t.Errorf("forced parent: the child's denial %v is not forced", st[0].GetDenial())
		}
	})
}
