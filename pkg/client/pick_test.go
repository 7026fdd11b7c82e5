package client

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
)

// TestPassedOverSparesTheDaemonOnProbation: when every daemon is passed
// over (the live one slow, the rejoined one on probation), a call its
// caller waits on within a budget goes to the slow live daemon, never to
// the one on probation; a call with no budget may still try it.
func TestPassedOverSparesTheDaemonOnProbation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	live := &daemonConn{pending: map[uint64]time.Time{1: now.Add(-time.Second)}} // slow: a call out for 1 s
	back := &daemonConn{pending: map[uint64]time.Time{}, probation: true}
	p := &answeringPicker{daemons: []*daemonConn{live, back}}
	budgetedCall := balancer.PickInfo{FullMethodName: "/breakerd.v1.BreakerService/Allow", Ctx: withBudget(context.Background())}
	for i := range 8 { // every turn of the round robin
		p.next.Store(uint64(i))
		if _, err := p.Pick(budgetedCall); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(back.pending); n != 0 {
		t.Errorf("the daemon on probation got %d of 8 budgeted calls while every daemon was passed over, want 0", n)
	}
	if _, err := p.Pick(balancer.PickInfo{FullMethodName: "/breakerd.v1.BreakerService/Record", Ctx: context.Background()}); err != nil {
		t.Fatal(err)
	}
	if n := len(back.pending); n != 1 {
		t.Errorf("the daemon on probation got %d unbudgeted calls, want 1 (its trial)", n)
	}
}
