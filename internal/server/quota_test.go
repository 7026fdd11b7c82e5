package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

const (
	w1Token = "w1-worker-token-0123456789"
	w2Token = "w2-worker-token-0123456789"
)

// fakeClock is the quotas' clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func startWithTokens(t *testing.T, b *testredis.Backend, o daemontest.Options) *daemontest.Daemon {
	t.Helper()
	tk, err := auth.Parse([]byte("tokens:\n  - {name: w1, role: worker, token: " + w1Token + ", workers: [w1]}\n  - {name: w2, role: worker, token: " + w2Token + ", workers: [w2]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	o.Server = append(o.Server, auth.New(tk).ServerOptions()...)
	return daemontest.StartWith(t, b, o)
}

func api(t *testing.T, d *daemontest.Daemon, token string) pb.BreakerServiceClient {
	t.Helper()
	c, err := client.Dial(d.Addr, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.API()
}

// TestNewBreakerQuota: one token names at most 3 new breakers a minute;
// past that its calls on made-up names are refused and write nothing,
// while names that hold state (created by another token) and names it
// has used stay open to it. A burst of refusals is one log line.
func TestNewBreakerQuota(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		var logs daemontest.Buffer
		d := startWithTokens(t, b, daemontest.Options{Limits: server.Limits{
			NewBreakersPerMinute: 3, AlertsPerMinute: 2, Now: clock.Now,
			Log: slog.New(slog.NewTextHandler(&logs, nil))}})
		ctx := context.Background()
		w1, w2 := api(t, d, w1Token), api(t, d, w2Token)
		allow := func(c pb.BreakerServiceClient, worker, name string) (*pb.AllowResponse, error) {
			return c.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
		}
		name := func(i int) string { return b.Breaker(fmt.Sprintf("random-%d", i)) }
		for i := range 3 {
			if _, err := allow(w1, "w1", name(i)); err != nil {
				t.Fatalf("Allow(%q), new breaker %d of 3: %v", name(i), i+1, err)
			}
		}
		for i := 3; i < 20; i++ {
			a, err := w1.Allow(ctx, &pb.AllowRequest{Breaker: name(i), WorkerId: "w1"})
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "new breakers") {
				t.Fatalf("Allow(%q) past the quota = %v, %v; want ResourceExhausted", name(i), a, err)
			}
			_, err = w1.Record(ctx, &pb.RecordRequest{Breaker: name(i), WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR})
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("Record(%q) past the quota: %v, want ResourceExhausted", name(i), err)
			}
			if ok, err := d.Store.Exists(ctx, name(i)); ok || err != nil {
				t.Fatalf("Exists(%q) after refused calls = %v, %v; want no state written", name(i), ok, err)
			}
		}
		// A name w1 has used, and one that holds state, stay open to it.
		if _, err := allow(w1, "w1", name(0)); err != nil {
			t.Errorf("Allow(%q), a name w1 used: %v", name(0), err)
		}
		shared := b.Breaker("shared")
		a, err := allow(w2, "w2", shared)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w2.Record(ctx, &pb.RecordRequest{Breaker: shared, WorkerId: "w2", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR}); err != nil {
			t.Fatal(err)
		}
		if _, err := allow(w1, "w1", shared); err != nil {
			t.Errorf("Allow(%q), a breaker with state, past w1's quota: %v", shared, err)
		}
		// 20s on, a third of the minute's quota is back: one new name.
		clock.Add(20 * time.Second)
		if _, err := allow(w1, "w1", name(100)); err != nil {
			t.Errorf("Allow after 20s: %v, want one new name admitted", err)
		}
		if _, err := allow(w1, "w1", name(101)); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("a second new name after 20s: %v, want ResourceExhausted", err)
		}
		if n := strings.Count(logs.String(), "quota: calls refused"); n != 1 || !strings.Contains(logs.String(), "token=w1") {
			t.Errorf("%d summary lines for 36 refusals in a minute, want 1 for w1:\n%s", n, logs.String())
		}
		clock.Add(time.Minute)
		for i := 200; i < 204; i++ {
			_, _ = allow(w1, "w1", name(i))
		}
		if n := strings.Count(logs.String(), "quota: calls refused"); n != 2 || !strings.Contains(logs.String(), "new_breakers_refused=1") {
			t.Errorf("after a minute: %d summary lines, want a second one counting one refusal:\n%s", n, logs.String())
		}
	})
}

// TestAlertQuota: UNAUTHENTICATED outcomes (each raises an alert) past a
// token's alert quota are still answered and logged, marked quiet (hooks
// send them in a summary: TestSecurityAlertsPastTheQuotaAreSummarised);
// another token's alerts are not.
func TestAlertQuota(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		d := startWithTokens(t, b, daemontest.Options{Limits: server.Limits{AlertsPerMinute: 2, Now: clock.Now}})
		ctx := context.Background()
		w1, w2 := api(t, d, w1Token), api(t, d, w2Token)
		name := b.Breaker("vendor")
		record := func(c pb.BreakerServiceClient, worker string, o pb.Outcome) error {
			_, err := c.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: &pb.Ticket{}, Outcome: o})
			return err
		}
		before := len(eventsOf(t, d, name))
		for i := range 2 {
			if err := record(w1, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED); err != nil {
				t.Fatalf("UNAUTHENTICATED %d of 2: %v", i+1, err)
			}
		}
		after := len(eventsOf(t, d, name))
		for range 5 {
			if err := record(w1, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED); err != nil {
				t.Fatalf("UNAUTHENTICATED past the quota: %v, want it answered", err)
			}
		}
		if n := len(eventsOf(t, d, name)); n != after+5 || after != before+2 {
			t.Errorf("events: %d before, %d after 2 within the quota, %d after 5 past it; want each logged", before, after, n)
		}
		quiet := 0
		for _, m := range b.Client.XRange(ctx, store.KeysOf(name).Events, "-", "+").Val() {
			if m.Values["quiet"] != nil {
				quiet++
			}
		}
		if quiet != 5 {
			t.Errorf("%d alerts marked quiet, want the 5 past the quota", quiet)
		}
		if err := record(w1, "w1", pb.Outcome_OUTCOME_TIMEOUT); err != nil {
			t.Errorf("a TIMEOUT past the alert quota: %v", err)
		}
		if err := record(w2, "w2", pb.Outcome_OUTCOME_UNAUTHENTICATED); err != nil {
			t.Errorf("another token's UNAUTHENTICATED: %v", err)
		}
	})
}

func eventsOf(t *testing.T, d *daemontest.Daemon, name string) []*pb.Event {
	t.Helper()
	evs, err := d.Store.Events(context.Background(), store.EventQuery{Breaker: name})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestWatchCapsAreResourceExhausted: past the per-token cap a Watch is
// refused with ResourceExhausted; another token still gets one; closing
// a stream frees its slot.
func TestWatchCapsAreResourceExhausted(t *testing.T) {
	b := testredis.Mini(t)
	d := startWithTokens(t, b, daemontest.Options{Watch: events.Limits{Streams: 3, PerOwner: 2}})
	w1, w2 := api(t, d, w1Token), api(t, d, w2Token)
	open := func(c pb.BreakerServiceClient) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := c.Watch(ctx, &pb.WatchRequest{Breakers: []string{b.Breaker("x")}})
		if err == nil {
			// Headers come once the subscription is live; a refused
			// stream ends with its status instead.
			var md map[string][]string
			if md, err = s.Header(); err == nil && md == nil {
				_, err = s.Recv()
			}
		}
		if err != nil {
			cancel()
		}
		return cancel, err
	}
	var cancels []context.CancelFunc
	for i := range 2 {
		c, err := open(w1)
		if err != nil {
			t.Fatalf("w1's Watch %d of 2: %v", i+1, err)
		}
		cancels = append(cancels, c)
	}
	refused := func(what string, c pb.BreakerServiceClient, want string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := c.Watch(ctx, &pb.WatchRequest{Breakers: []string{b.Breaker("x")}})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ResourceExhausted naming %q", what, err, want)
		}
	}
	refused("w1's third Watch", w1, `"w1" holds 2`)
	c, err := open(w2)
	if err != nil {
		t.Fatalf("w2's Watch: %v", err)
	}
	cancels = append(cancels, c)
	refused("a fourth Watch on the daemon", w2, "at most 3")
	for _, c := range cancels {
		c()
	}
}

// TestMaxBreakersIsResourceExhausted: past --max-breakers a Record that
// would create a new breaker gets ResourceExhausted naming the ceiling;
// one on a breaker holding state, and an operator's Force, still work.
func TestMaxBreakersIsResourceExhausted(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		live := store.LiveKey + ":" + b.Prefix
		t.Cleanup(func() { _ = b.Client.Del(context.Background(), live).Err() })
		d := daemontest.Start(t, b, store.Options{MaxBreakers: 2, LiveKey: live})
		c := api(t, d, "")
		ctx := context.Background()
		rec := func(name string) error {
			_, err := c.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker(name), WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_TIMEOUT})
			return err
		}
		for _, n := range []string{"a", "b"} {
			if err := rec(n); err != nil {
				t.Fatalf("breaker %s within the ceiling: %v", n, err)
			}
		}
		err := rec("c")
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "ceiling of 2 (--max-breakers)") {
			t.Fatalf("a 3rd breaker past a ceiling of 2: %v, want ResourceExhausted naming the ceiling", err)
		}
		if err := rec("a"); err != nil {
			t.Errorf("a breaker holding state, past the ceiling: %v", err)
		}
		if _, err := c.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("c"), Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "maintenance", Operator: "ops"}); err != nil {
			t.Errorf("Force past the ceiling: %v", err)
		}
	})
}
