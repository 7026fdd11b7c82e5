package recovery_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/recovery"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// fakeClock is a virtual clock: After's channels fire only when the test
// calls Advance.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) At(t time.Time) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(f.now) {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: t, ch: ch})
	return ch
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			kept = append(kept, w)
		} else {
			w.ch <- f.now
		}
	}
	f.waiters = kept
}

// vendor is an httptest vendor whose status endpoint follows a schedule on
// the virtual clock: 503 until upAt, 200 from then on. It counts requests.
type vendor struct {
	srv      *httptest.Server
	clk      *fakeClock
	upAt     atomic.Int64 // ns on clk; 0: never
	requests atomic.Int64
	sawAuth  atomic.Int64
}

func newVendor(t *testing.T, clk *fakeClock) *vendor {
	v := &vendor{clk: clk}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.requests.Add(1)
		if r.Header.Get("X-Api-Key") == "sekrit-header" {
			v.sawAuth.Add(1)
		}
		if up := v.upAt.Load(); up != 0 && !clk.Now().Before(time.Unix(0, up)) {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

// daemon is one breakerd's share of the fleet for recovery checks: its
// store, event hub and Checker.
type daemon struct {
	st   *store.Store
	ck   *recovery.Checker
	stop context.CancelFunc
	done chan struct{}
}

const interval = 30 * time.Second

func testPolicy(url string) policy.Policy {
	p := policy.Default()
	p.Threshold, p.MinWorkers, p.Jitter = 1, 1, 0
	p.CooldownBase, p.CooldownCap = 10*time.Minute, 15*time.Minute
	p.RecoveryCheckInterval = interval
	if url != "" {
		p.RecoveryCheck = &policy.RecoveryCheck{Timeout: 5 * time.Second,
			HTTP: &policy.HTTPCheck{Method: http.MethodGet, URL: url, ExpectStatus: 200,
				Headers: map[string]string{"X-Api-Key": "sekrit-header"}}}
	}
	return p
}

func startDaemon(t *testing.T, b *testredis.Backend, clk *fakeClock, id string, p policy.Policy, log *slog.Logger) *daemon {
	t.Helper()
	st := store.New(b.NewClient(t), store.Options{Policies: policy.NewSet(p), Now: b.Clock(), Channel: b.Prefix + "events"})
	if err := st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ck, err := recovery.New(recovery.Options{Store: st, ID: id, Clock: clk, Rand: func() float64 { return 0 }, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	hub := events.NewHub(b.NewClient(t), st.Channel(), log)
	hub.Observe(ck.Observe)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	d := &daemon{st: st, ck: ck, stop: cancel, done: make(chan struct{})}
	go func() { _ = hub.Run(ctx, ready) }()
	go func() { defer close(d.done); _ = ck.Run(ctx) }()
	<-ready
	t.Cleanup(func() { cancel(); <-d.done })
	return d
}

// trip opens name through d: one failure with threshold 1.
func trip(t *testing.T, d *daemon, name string) *pb.BreakerState {
	t.Helper()
	ctx := context.Background()
	a, err := d.st.Allow(ctx, name, "w1")
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Ticket: a.Ticket})
	if err != nil || r.State.GetState() != pb.State_STATE_OPEN {
		t.Fatalf("trip: %v %v", r, err)
	}
	return r.State
}

// tick moves the fleet's clock past every daemon's next timer and waits
// until each running daemon has decided for this turn.
func tick(t *testing.T, b *testredis.Backend, clk *fakeClock, running ...*daemon) {
	t.Helper()
	before := make([]int64, len(running))
	for i, d := range running {
		before[i] = d.ck.Stats().Rounds
	}
	d := interval + interval/10 + time.Second // past 1.02 intervals, whatever the jitter
	b.Advance(d)
	clk.Advance(d)
	for i, d := range running {
		daemontest.Eventually(t, "a daemon's check round", func() bool { return d.ck.Stats().Rounds > before[i] })
	}
}

// TestRecoveryCheckFleet: two daemons, a check every (virtual) 30 s. One
// daemon checks at a time (the vendor counts one request a turn); a
// failed check moves nothing; when the checking daemon stops, the other
// takes the lease; the first success half-opens the breaker and the next
// Allow is the probe.
func TestRecoveryCheckFleet(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		v := newVendor(t, clk)
		var logs bytes.Buffer
		var logMu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		url := strings.Replace(v.srv.URL, "http://", "http://user:sekrit-pass@", 1) + "/status/" + url.PathEscape(b.Prefix) + "?key=sekrit-query"
		p := testPolicy(url)
		d1 := startDaemon(t, b, clk, "d1", p, log)
		d2 := startDaemon(t, b, clk, "d2", p, log)
		name := b.Breaker("search")
		ctx := context.Background()

		opened := trip(t, d1, name)
		openHash, err := b.Client.HGetAll(ctx, store.KeysOf(name).State).Result()
		if err != nil {
			t.Fatal(err)
		}
		daemontest.Eventually(t, "both daemons hear the breaker open", func() bool { return d1.ck.Open() == 1 && d2.ck.Open() == 1 })

		// The vendor stays down: one check a turn, from one daemon, and
		// nothing moves.
		for turn := int64(1); turn <= 4; turn++ {
			tick(t, b, clk, d1, d2)
			if got := v.requests.Load(); got != turn {
				t.Fatalf("turn %d: %d check requests reached the vendor, want %d (one a turn, fleet-wide)", turn, got, turn)
			}
			st, err := d1.st.Get(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if st.GetState() != pb.State_STATE_OPEN || st.GetNextProbeAtMs() != opened.GetNextProbeAtMs() ||
				st.GetGeneration() != opened.GetGeneration() {
				t.Fatalf("turn %d: a failed check moved the breaker: %v, was %v", turn, st, opened)
			}
			// The stored schedule (open_until, backoff level, cooldown) is
			// untouched, field for field.
			h, err := b.Client.HGetAll(ctx, store.KeysOf(name).State).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"probe_at", "level", "cd", "opened", "gen", "st"} {
				if h[f] != openHash[f] {
					t.Fatalf("turn %d: a failed check changed %s: %q, was %q", turn, f, h[f], openHash[f])
				}
			}
		}
		if v.sawAuth.Load() != v.requests.Load() {
			t.Errorf("the check's header reached the vendor %d times in %d requests", v.sawAuth.Load(), v.requests.Load())
		}
		g1, g2 := d1.ck.Stats().Granted, d2.ck.Stats().Granted
		if g1+g2 != 4 || (g1 != 0 && g2 != 0) {
			t.Fatalf("leases d1 %d, d2 %d: want all 4 held by one daemon", g1, g2)
		}
		holder, other := d1, d2
		if g2 > 0 {
			holder, other = d2, d1
		}

		// The checking daemon stops: the other takes over once the
		// holder's first claim (half an interval) has passed.
		holder.stop()
		<-holder.done
		tick(t, b, clk, other)
		if got := v.requests.Load(); got != 4 {
			t.Fatalf("the turn after the holder stopped: %d requests, want still 4 (the holder's claim)", got)
		}
		tick(t, b, clk, other)
		if got, g := v.requests.Load(), other.ck.Stats().Granted; got != 5 || g != 1 {
			t.Fatalf("the lease did not move: %d requests (want 5), the other daemon took %d leases (want 1)", got, g)
		}

		// The vendor recovers 1 s after that check; the next turn's check
		// half-opens the breaker, within 35 s of the recovery.
		upAt := clk.Now().Add(time.Second)
		v.upAt.Store(upAt.UnixNano())
		tick(t, b, clk, other)
		if got := other.ck.Stats().Recovered; got != 1 {
			t.Fatalf("recovered %d breakers, want 1", got)
		}
		st, err := other.st.Get(ctx, name)
		if err != nil || st.GetState() != pb.State_STATE_HALF_OPEN || st.GetGeneration() != opened.GetGeneration()+1 {
			t.Fatalf("after a successful check: %v %v, want half_open", st, err)
		}
		if lag := clk.Now().Sub(upAt); lag > 35*time.Second {
			t.Errorf("half-open %s after the vendor recovered, want within 35s", lag)
		}
		a, err := d1.st.Allow(ctx, name, "w2")
		if err != nil || a.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("next Allow = %v %v, want PROBE", a.GetDecision(), err)
		}
		msgs, err := b.Client.XRange(ctx, store.KeysOf(name).Events, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, m := range msgs {
			if m.Values["cause"] == "recovery_check" {
				found = true
				if m.Values["from"] != "open" || m.Values["to"] != "half_open" || !strings.HasPrefix(m.Values["actor"].(string), "d") {
					t.Errorf("recovery event %v", m.Values)
				}
			}
			for _, f := range m.Values {
				if s, _ := f.(string); strings.Contains(s, "sekrit") {
					t.Errorf("an event carries a credential: %v", m.Values)
				}
			}
		}
		if !found {
			t.Errorf("no open -> half_open event with cause recovery_check in %v", msgs)
		}
		logMu.Lock()
		out := logs.String()
		logMu.Unlock()
		if !strings.Contains(out, "recovery check") || !strings.Contains(out, "level=DEBUG") {
			t.Errorf("checks not logged at debug level:\n%s", out)
		}
		if strings.Contains(out, "sekrit") {
			t.Errorf("the logs carry a credential:\n%s", out)
		}
	})
}

// TestRecoveryCheckUnreachable: a check whose target refuses connections
// is logged once, as likely misconfiguration, and moves nothing.
func TestRecoveryCheckUnreachable(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
		url := "http://admin:sekrit-pass@" + testredis.FreeAddr(t) + "/health/" + url.PathEscape(b.Prefix)
		d := startDaemon(t, b, clk, "d1", testPolicy(url), log)
		name := b.Breaker("search")
		opened := trip(t, d, name)
		daemontest.Eventually(t, "the daemon hears the breaker open", func() bool { return d.ck.Open() == 1 })
		for range 3 {
			tick(t, b, clk, d)
		}
		st, err := d.st.Get(context.Background(), name)
		if err != nil || st.GetState() != pb.State_STATE_OPEN || st.GetGeneration() != opened.GetGeneration() {
			t.Fatalf("unreachable check moved the breaker: %v %v", st, err)
		}
		mu.Lock()
		out := logs.String()
		mu.Unlock()
		if n := strings.Count(out, "misconfigured recovery_check"); n != 1 {
			t.Errorf("misconfiguration logged %d times, want once:\n%s", n, out)
		}
		if strings.Contains(out, "sekrit") {
			t.Errorf("the logs carry a credential:\n%s", out)
		}
	})
}

// TestNoRecoveryCheckIsToday: without a check, an open breaker's turn
// sends nothing, writes no lease, and drops the breaker from the view.
func TestNoRecoveryCheckIsToday(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		d := startDaemon(t, b, clk, "d1", testPolicy(""), nil)
		name := b.Breaker("search")
		trip(t, d, name)
		daemontest.Eventually(t, "the daemon hears the breaker open", func() bool { return d.ck.Open() == 1 })
		before := b.Commands()
		tick(t, b, clk, d)
		if n := d.ck.Open(); n != 0 {
			t.Errorf("the daemon keeps %d breakers without a check, want 0", n)
		}
		if s := d.ck.Stats(); s.Granted != 0 || s.Checked != 0 {
			t.Errorf("stats %+v without a check, want no lease and no check", s)
		}
		if n := b.Commands() - before; n != 0 {
			t.Errorf("%d Redis commands without a check, want 0", n)
		}
		if n, err := b.Client.Exists(context.Background(), store.KeysOf(name).Check).Result(); err != nil || n != 0 {
			t.Errorf("check lease key exists (%d, %v) without a check", n, err)
		}
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestSecurityRecoveryChecksBoundedPerTarget (L7): many open breakers sharing one
// check URL (one worker under many ids can open them) reach the vendor at
// most once a turn fleet-wide, not once per breaker.
func TestSecurityRecoveryChecksBoundedPerTarget(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		v := newVendor(t, clk)
		// The path is the test's own: a target's lease is fleet-wide, and
		// another copy of the suite may reuse the port.
		p := testPolicy(v.srv.URL + "/status/" + url.PathEscape(b.Prefix))
		d1 := startDaemon(t, b, clk, "d1", p, nil)
		d2 := startDaemon(t, b, clk, "d2", p, nil)
		const n = 20
		for i := range n {
			trip(t, d1, b.Breaker(fmt.Sprintf("tool-%d", i)))
		}
		daemontest.Eventually(t, "both daemons hear every breaker open", func() bool { return d1.ck.Open() == n && d2.ck.Open() == n })
		for turn := int64(1); turn <= 3; turn++ {
			tick(t, b, clk, d1, d2)
			daemontest.Eventually(t, "every breaker's round", func() bool {
				s1, s2 := d1.ck.Stats(), d2.ck.Stats()
				return s1.Rounds+s2.Rounds >= 2*n*turn
			})
			if got := v.requests.Load(); got != turn {
				t.Fatalf("turn %d: %d check requests reached the vendor for %d breakers sharing its URL, want %d (one a turn)", turn, got, n, turn)
			}
		}
		if s1, s2 := d1.ck.Stats(), d2.ck.Stats(); s1.Skipped+s2.Skipped == 0 {
			t.Errorf("no lease was given up for the shared target: %+v %+v", s1, s2)
		}
	})
}
