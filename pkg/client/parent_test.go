package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// A parent scope through the client, in both modes: a success through
// one child ends the parent's failure run (fast mode sends it: a child's
// successes are never skipped), and once the children's failures from
// two workers open the parent, every Allow on either child is denied with
// the parent's scope and reason, asked of breakerd (never the fast view),
// and no request reaches the vendor.
func TestParentScopeDeniesThroughTheClient(t *testing.T) {
	eachMode(t, func(t *testing.T, m *clientMode) { testParentScope(t, m) })
}

func testParentScope(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web, news := b.Breaker("search-vendor"), b.Breaker("web_search"), b.Breaker("news_search")
		set, err := policy.Parse([]byte(fmt.Sprintf(`
defaults:
  jitter: 0
breakers:
  - match: %q
    threshold: 2
    min_workers: 2
  - match: %q
    parent: %q
  - match: %q
    parent: %q
`, parent, web, parent, news, parent)))
		if err != nil {
			t.Fatal(err)
		}
		d := start(t, b, store.Options{Policies: set})
		c1, c2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		v := newVendor(t, http.StatusServiceUnavailable)
		ctx := context.Background()

		_ = c1.Call(ctx, web, v.call)
		m.settle(t, d, web, c1)
		if p := state(t, d, parent); p.Failures != 1 {
			t.Fatalf("parent failures %d after a failure through web_search, want 1", p.Failures)
		}
		v.status.Store(http.StatusOK)
		if err := c2.Call(ctx, news, v.call); err != nil {
			t.Fatal(err)
		}
		m.settle(t, d, news, c2)
		if p := state(t, d, parent); p.Failures != 0 {
			t.Fatalf("parent failures %d after a success through news_search, want 0 (the success ends its run)", p.Failures)
		}

		v.status.Store(http.StatusServiceUnavailable)
		_ = c1.Call(ctx, web, v.call)
		_ = c2.Call(ctx, news, v.call)
		m.settle(t, d, web, c1, c2)
		if p := state(t, d, parent); p.State != pb.State_STATE_OPEN {
			t.Fatalf("parent %v after failures from 2 workers through its children, want OPEN", p.State)
		}
		hits, allows := v.hits.Load(), d.Calls.Get("Allow")
		for _, c := range []*Client{c1, c2} {
			for _, child := range []string{web, news} {
				err := c.Call(ctx, child, v.call)
				var open *CircuitOpenError
				if !errors.As(err, &open) || open.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || open.Scope != parent ||
					open.Reason != parent+" failing: 2 consecutive failures from 2 workers, last: server error (5xx): HTTP 503 Service Unavailable" {
					t.Fatalf("Call(%s) through %s = %v; want a CircuitOpenError DENIED_PARENT_OPEN by %s with its reason", child, c.WorkerID(), err, parent)
				}
			}
		}
		if n := v.hits.Load() - hits; n != 0 {
			t.Errorf("%d requests reached the vendor while its parent scope was open, want 0", n)
		}
		if n := d.Calls.Get("Allow") - allows; n != 4 {
			t.Errorf("%d Allow RPCs for 4 calls on children, want 4 (a child is always asked of breakerd)", n)
		}
	})
}
