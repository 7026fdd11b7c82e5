package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecurityChildLimitedTokenCannotHoldTheParentClosed (L6): workers w1
// and w2 fail on web_search, whose parent (the vendor) trips on 3
// failures from 2 workers. A token limited to news_search, the vendor's
// other child, records a success between each failure. Its successes are
// not counted on the vendor, which it may not name: the vendor trips on
// the third failure as if the token were silent. A token that may name the
// vendor still ends its run.
func TestSecurityChildLimitedTokenCannotHoldTheParentClosed(t *testing.T) {
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

// TestSecurityAlertsPastTheQuotaAreSummarised (M7): one token acting as many
// worker ids raises suspect_worker alerts as fast as it records (threshold
// 1: each failure of a lone worker after a success). With a quota of 3
// alerts a minute, every Record is answered, every alert is in the event
// log, and the hook receives 3 alerts and then one summary a minute, which
// counts the alerts not sent since the previous one.
func TestSecurityAlertsPastTheQuotaAreSummarised(t *testing.T) {
	const poolToken = "pool-worker-token-0123456789"
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		var (
			mu        sync.Mutex
			kinds     []string
			summaries []int64
		)
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p hooks.Payload
			_ = json.NewDecoder(r.Body).Decode(&p)
			mu.Lock()
			defer mu.Unlock()
			kinds = append(kinds, p.Event)
			if p.Summary != nil {
				if p.Summary.Token != "pool" {
					t.Errorf("summary for token %q, want pool", p.Summary.Token)
				}
				summaries = append(summaries, p.Summary.Alerts)
			}
		}))
		defer hook.Close()
		delivered := func(event string) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, k := range kinds {
				if k == event {
					n++
				}
			}
			return n
		}
		set, err := policy.Parse([]byte("defaults:\n  threshold: 1\n  min_workers: 2\n  jitter: 0\n"))
		if err != nil {
			t.Fatal(err)
		}
		tk, err := auth.Parse(fmt.Appendf(nil, "tokens:\n  - {name: pool, role: worker, token: %s, workers: [\"w*\"]}\n", poolToken))
		if err != nil {
			t.Fatal(err)
		}
		clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		name := b.Breaker("vendor")
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{Policies: set},
			Server: auth.New(tk).ServerOptions(),
			Limits: server.Limits{AlertsPerMinute: 3, Now: clock.Now},
			Hooks: &hooks.Options{Hooks: []hooks.Hook{{Name: b.Prefix + "oncall", URL: hook.URL,
				Events:   []string{hooks.EventSuspectWorker, hooks.EventForced},
				Breakers: []string{name}, Secret: strings.Repeat("s", 40)}},
				Sweep: 50 * time.Millisecond},
		})
		c := api(t, d, poolToken)
		flood := func(from, to int) {
			t.Helper()
			for i := from; i < to; i++ {
				w := fmt.Sprintf("w%d", i)
				for _, o := range []pb.Outcome{pb.Outcome_OUTCOME_TIMEOUT, pb.Outcome_OUTCOME_SUCCESS} {
					a, err := c.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: w})
					if err != nil {
						t.Fatalf("Allow as %s: %v", w, err)
					}
					if _, err := c.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: w, Ticket: a.GetTicket(), Outcome: o}); err != nil {
						t.Fatalf("Record(%v) as %s past the alert quota: %v, want it answered", o, w, err)
					}
				}
			}
		}
		// A Force after each flood: its webhook comes after the flood's.
		mark := func(n int) {
			t.Helper()
			if _, err := d.Store.Force(ctx, name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "ops"); err != nil {
				t.Fatal(err)
			}
			daemontest.Eventually(t, "the Force's webhook", func() bool { return delivered(hooks.EventForced) == n })
		}
		flood(0, 20)
		mark(1)
		if n := delivered(hooks.EventSuspectWorker); n != 4 {
			t.Errorf("%d suspect_worker webhooks for 20 alerts in a minute, want 4 (3, then a summary)", n)
		}
		clock.Add(time.Minute)
		flood(20, 24)
		mark(2)
		if n := delivered(hooks.EventSuspectWorker); n != 8 {
			t.Errorf("%d suspect_worker webhooks after 4 more alerts a minute later, want 8", n)
		}
		mu.Lock()
		if fmt.Sprint(summaries) != "[1 17]" {
			t.Errorf("summaries counted %v alerts, want [1 17] (itself; then 16 not sent and itself)", summaries)
		}
		mu.Unlock()
		evs, err := d.Store.Events(ctx, store.EventQuery{Breaker: name})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.GetKind() == pb.EventKind_EVENT_KIND_SUSPECT_WORKER {
				n++
			}
		}
		if n != 24 {
			t.Errorf("the event log holds %d suspect_worker events, want all 24", n)
		}
	})
}
