package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// fixture is one Store on one backend, with the clock under the test's
// control and no jitter unless a test asks for it.
type fixture struct {
	*testredis.Backend
	t  *testing.T
	st *store.Store
}

func newFixture(t *testing.T, b *testredis.Backend, o store.Options) *fixture {
	t.Helper()
	o.Now = b.Clock()
	if o.Rand == nil {
		o.Rand = func() float64 { return 0 }
	}
	if o.Channel == "" {
		o.Channel = b.Prefix + "events"
	}
	st := store.New(b.Client, o)
	if err := st.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	b.ResetCounts()
	return &fixture{Backend: b, t: t, st: st}
}

func (f *fixture) allow(breaker, worker string) *pb.AllowResponse {
	f.t.Helper()
	res, err := f.st.Allow(context.Background(), breaker, worker)
	if err != nil {
		f.t.Fatalf("Allow(%q, %q): %v", breaker, worker, err)
	}
	return res
}

// record reports outcome for a call admitted with ticket.
func (f *fixture) record(breaker, worker string, ticket *pb.Ticket, outcome pb.Outcome, mods ...func(*pb.RecordRequest)) *pb.RecordResponse {
	f.t.Helper()
	req := &pb.RecordRequest{Breaker: breaker, WorkerId: worker, Ticket: ticket, Outcome: outcome, LatencyMs: 30000}
	for _, m := range mods {
		m(req)
	}
	res, err := f.st.Record(context.Background(), req)
	if err != nil {
		f.t.Fatalf("Record(%q, %q, %v): %v", breaker, worker, outcome, err)
	}
	return res
}

// call runs one allowed call through Allow and Record and returns the
// record's answer; it fails the test if Allow denies.
func (f *fixture) call(breaker, worker string, outcome pb.Outcome, mods ...func(*pb.RecordRequest)) *pb.RecordResponse {
	f.t.Helper()
	a := f.allow(breaker, worker)
	if a.Decision != pb.Decision_DECISION_ALLOWED && a.Decision != pb.Decision_DECISION_PROBE {
		f.t.Fatalf("Allow(%q, %q) = %v (%s), want a call let through", breaker, worker, a.Decision, a.Reason)
	}
	return f.record(breaker, worker, a.Ticket, outcome, mods...)
}

// trip opens breaker with the default policy: 4 timeouts from w1, 1 from w2.
func (f *fixture) trip(breaker string) {
	f.t.Helper()
	for range 4 {
		f.call(breaker, "w1", pb.Outcome_OUTCOME_TIMEOUT)
	}
	if r := f.call(breaker, "w2", pb.Outcome_OUTCOME_TIMEOUT); r.State.State != pb.State_STATE_OPEN {
		f.t.Fatalf("after 5 failures from 2 workers: state %v, want OPEN", r.State.State)
	}
}

func (f *fixture) get(breaker string) *pb.BreakerState {
	f.t.Helper()
	st, err := f.st.Get(context.Background(), breaker)
	if err != nil {
		f.t.Fatalf("Get(%q): %v", breaker, err)
	}
	return st
}

// keysOf returns which of the breaker's keys exist.
func (f *fixture) keysOf(breaker string) []string {
	f.t.Helper()
	var out []string
	k := store.KeysOf(breaker)
	for _, kk := range []struct{ name, key string }{{"state", k.State}, {"workers", k.Workers}, {"events", k.Events}} {
		n, err := f.Client.Exists(context.Background(), kk.key).Result()
		if err != nil {
			f.t.Fatal(err)
		}
		if n == 1 {
			out = append(out, kk.name)
		}
	}
	return out
}

func (f *fixture) events(breaker string) []map[string]any {
	f.t.Helper()
	msgs, err := f.Client.XRange(context.Background(), store.EventsKey(breaker), "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		ev, err := store.EventFromStream(m)
		if err != nil {
			f.t.Fatal(err)
		}
		out[i] = m.Values
		out[i]["reason"] = ev.Reason // rendered in Go from the stored cause
	}
	return out
}

func rateLimited(retryAfter, deadline time.Duration) func(*pb.RecordRequest) {
	return func(r *pb.RecordRequest) {
		r.RetryAfterMs = retryAfter.Milliseconds()
		r.DeadlineMs = deadline.Milliseconds()
	}
}

const cooldown = 30 * time.Second
