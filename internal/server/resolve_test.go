package server

import (
	"context"
	"sync"
	"testing"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// countingResolver is a policy set that counts how often each breaker's
// policy and group are resolved.
type countingResolver struct {
	set    *policy.Set
	mu     sync.Mutex
	policy map[string]int
	group  map[string]int
}

func (c *countingResolver) For(name string) policy.Policy {
	c.mu.Lock()
	c.policy[name]++
	c.mu.Unlock()
	return c.set.For(name)
}

func (c *countingResolver) GroupOf(name string) (policy.Group, bool) {
	c.mu.Lock()
	c.group[name]++
	c.mu.Unlock()
	return c.set.GroupOf(name)
}

// TestRecordResolvesThePolicyOnce: one Record, classified from its
// evidence and counted on the breaker and its parent, resolves each
// breaker's policy and group once (the input is built once and passed
// down), and the parent's half is decided under the resolver's policy,
// not one the store looks up again.
func TestRecordResolvesThePolicyOnce(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		child, parent := b.Breaker("pay:charge"), b.Breaker("pay")
		set, err := policy.Parse([]byte("breakers:\n  - match: \"" + child + "\"\n    parent: \"" + parent + "\"\n" +
			"  - match: \"" + parent + "\"\n    threshold: 1\n    min_workers: 1\n"))
		if err != nil {
			t.Fatal(err)
		}
		// The store's own set has the default policy for both: were the
		// parent's policy looked up there, one failure would not open it.
		st := store.New(b.NewClient(t), store.Options{Now: b.Clock()})
		if err := st.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		srv := New(st, nil)
		res := &countingResolver{set: set, policy: map[string]int{}, group: map[string]int{}}
		srv.policies = func() store.Resolver { return res }

		out, err := srv.Record(context.Background(), &pb.RecordRequest{Breaker: child, WorkerId: "w1",
			Ticket: &pb.Ticket{}, Evidence: &pb.CallEvidence{HttpStatus: 503}})
		if err != nil {
			t.Fatal(err)
		}
		if !out.GetCounted() || out.GetClassifiedAs() != pb.Outcome_OUTCOME_SERVER_ERROR {
			t.Fatalf("Record(503) = %v counted %v, want a counted SERVER_ERROR", out.GetClassifiedAs(), out.GetCounted())
		}
		for _, name := range []string{child, parent} {
			if res.policy[name] != 1 || res.group[name] != 1 {
				t.Errorf("one Record resolved %q's policy %d times and its group %d times, want once each",
					name, res.policy[name], res.group[name])
			}
		}
		if got, err := st.Get(context.Background(), parent); err != nil || got.GetState() != pb.State_STATE_OPEN {
			t.Errorf("the parent after one counted failure under its threshold 1: %v, %v; want OPEN", got.GetState(), err)
		}
	})
}
