package server_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/daemontest"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecurityL6ChildLimitedTokenCannotHoldTheParentClosed: workers w1
// and w2 fail on web_search, whose parent (the vendor) trips on 3
// failures from 2 workers. A token limited to news_search, the vendor's
// other child, records a success between each failure. Its successes are
// not counted on the vendor, which it may not name: the vendor trips on
// the third failure as if the token were silent. A token that may name the
// vendor still ends its run.
func TestSecurityL6ChildLimitedTokenCannotHoldTheParentClosed(t *testing.T) {
	const newsToken, freeToken = "news-worker-token-0123456789", "free-worker-token-0123456789"
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		// Two vendors, one per case: the limited token's and the free one's.
		type family struct{ vendor, web, news string }
		fam := func(i int) family {
			return family{b.Breaker(fmt.Sprint("vendor", i)), b.Breaker(fmt.Sprint("web_search", i)), b.Breaker(fmt.Sprint("news_search", i))}
		}
		yaml := "defaults:\n  jitter: 0\nbreakers:\n"
		for i := range 2 {
			f := fam(i)
			yaml += fmt.Sprintf("  - {match: %q, threshold: 3, min_workers: 2}\n", f.vendor)
			yaml += fmt.Sprintf("  - {match: %q, parent: %q, threshold: 100}\n", f.web, f.vendor)
			yaml += fmt.Sprintf("  - {match: %q, parent: %q, threshold: 100}\n", f.news, f.vendor)
		}
		set, err := policy.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		tk, err := auth.Parse(fmt.Appendf(nil, `tokens:
  - {name: w1, role: worker, token: %s, workers: [w1]}
  - {name: w2, role: worker, token: %s, workers: [w2]}
  - {name: news, role: worker, token: %s, workers: [w3], breakers: [%q]}
  - {name: free, role: worker, token: %s, workers: [w4]}
`, w1Token, w2Token, newsToken, fam(0).news, freeToken))
		if err != nil {
			t.Fatal(err)
		}
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{Policies: set},
			Server: auth.New(tk).ServerOptions()})
		call := func(c pb.BreakerServiceClient, name, worker string, o pb.Outcome) {
			t.Helper()
			a, err := c.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
			if err != nil || a.GetDecision() != pb.Decision_DECISION_ALLOWED {
				t.Fatalf("Allow(%q, %q) = %v, %v; want ALLOWED", name, worker, a.GetDecision(), err)
			}
			if _, err := c.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: a.GetTicket(), Outcome: o}); err != nil {
				t.Fatalf("Record(%q, %q, %v): %v", name, worker, o, err)
			}
		}
		w1, w2 := api(t, d, w1Token), api(t, d, w2Token)
		for i, tc := range []struct {
			token, worker string
			trips         bool
		}{{newsToken, "w3", true}, {freeToken, "w4", false}} {
			f, c := fam(i), api(t, d, tc.token)
			call(w1, f.web, "w1", pb.Outcome_OUTCOME_TIMEOUT)
			call(c, f.news, tc.worker, pb.Outcome_OUTCOME_SUCCESS)
			call(w2, f.web, "w2", pb.Outcome_OUTCOME_TIMEOUT)
			call(c, f.news, tc.worker, pb.Outcome_OUTCOME_SUCCESS)
			call(w1, f.web, "w1", pb.Outcome_OUTCOME_TIMEOUT)
			st, err := d.Store.Get(ctx, f.vendor)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GetState() == pb.State_STATE_OPEN; got != tc.trips {
				t.Errorf("token of %s: the vendor is %v with %d failures after 3 failures from 2 workers between its successes, want open: %v",
					tc.worker, st.GetState(), st.GetFailures(), tc.trips)
			}
		}
	})
}
