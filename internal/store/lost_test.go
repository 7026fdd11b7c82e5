package store_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/forgotten"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// losses collects what a store reports through Options.OnLost.
type losses struct {
	mu   sync.Mutex
	seen []forgotten.Lost
}

func (l *losses) add(x forgotten.Lost) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, x)
}

func (l *losses) all() []forgotten.Lost {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]forgotten.Lost(nil), l.seen...)
}

// hear feeds the store every event of name's log, as the daemon's hub
// does from the live feed.
func (f *fixture) hear(name string) {
	f.t.Helper()
	evs, err := f.st.Events(context.Background(), store.EventQuery{Breaker: name})
	if err != nil {
		f.t.Fatalf("Events(%q): %v", name, err)
	}
	for _, e := range evs {
		f.st.ObserveEvent(e)
	}
}

// forget deletes every key of name, as an eviction, a flush or a restart
// without persistence does.
func (f *fixture) forget(name string) {
	f.t.Helper()
	k := store.KeysOf(name)
	if err := f.Client.Del(context.Background(), k.State, k.Workers, k.Events, k.RL, k.Pause, k.Window).Err(); err != nil {
		f.t.Fatalf("DEL %q's keys: %v", name, err)
	}
}

// TestForgottenOpenBreakerStaysDenied: Redis forgets an open breaker (its
// keys are gone); the daemon that heard it open denies it until its probe
// time instead of answering CLOSED at generation 0, reports the loss once,
// and then lets Redis decide again.
func TestForgottenOpenBreakerStaysDenied(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		var lost losses
		f := newFixture(t, b, store.Options{OnLost: lost.add})
		name := b.Breaker("forgotten")
		f.trip(name)
		f.hear(name)
		open := f.allow(name, "w3")
		if open.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Fatalf("Allow(%q) after the trip = %v, want DENIED_OPEN", name, open.Decision)
		}

		// --- Redis forgets: the daemon still denies, until the probe time.
		f.forget(name)
		b.Advance(time.Second)
		for range 2 {
			got := f.allow(name, "w3")
			if got.Decision != pb.Decision_DECISION_DENIED_OPEN || !strings.Contains(got.Reason, "lost this breaker's state") || got.RetryAfterMs <= 0 {
				t.Fatalf("Allow(%q) after Redis lost it = %v (%q, retry %d ms), want DENIED_OPEN from memory", name, got.Decision, got.Reason, got.RetryAfterMs)
			}
		}
		if got := lost.all(); len(got) != 1 || got[0].Breaker != name || got[0].KnownState() != "open" || got[0].Gen != 0 || got[0].Known.Gen != open.Ticket.Generation {
			t.Fatalf("OnLost saw %+v, want %q lost once at generation %d (Redis at 0)", got, name, open.Ticket.Generation)
		}

		// --- The alert: raised once for the fleet, an event in the log.
		ctx := context.Background()
		l := lost.all()[0]
		for i, want := range []bool{true, false} {
			raised, err := f.st.RaiseLost(ctx, l, "breakerd@test", "denied until its probe time")
			if err != nil || raised != want {
				t.Fatalf("RaiseLost #%d = %v, %v; want %v", i+1, raised, err, want)
			}
		}
		evs, err := f.st.Events(ctx, store.EventQuery{Breaker: name})
		if err != nil || len(evs) != 1 {
			t.Fatalf("Events after the loss = %d, %v; want the state_lost alert alone", len(evs), err)
		}
		if e := evs[0]; e.Kind != pb.EventKind_EVENT_KIND_STATE_LOST || e.From != pb.State_STATE_OPEN || e.To != pb.State_STATE_CLOSED ||
			e.Generation != l.Known.Gen || e.Actor != "breakerd@test" || e.Reason != "denied until its probe time" {
			t.Errorf("the alert = %+v", e)
		}
		f.st.ObserveEvent(evs[0]) // the alert heard back keeps what the daemon knows

		// --- Past the probe time Redis decides again.
		b.Advance(f.st.Policy(name).CooldownCap)
		if got := f.allow(name, "w3"); got.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow(%q) past the probe time = %v (%q), want ALLOWED", name, got.Decision, got.Reason)
		}
		if n := len(lost.all()); n != 1 {
			t.Errorf("OnLost called %d times, want 1", n)
		}
	})
}

// TestFindLostPin: a pin Redis forgot is found by FindLost (the check the
// daemon runs when Redis comes back), reported once; a breaker Redis still
// holds is not.
func TestFindLostPin(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		var lost losses
		f := newFixture(t, b, store.Options{OnLost: lost.add})
		ctx := context.Background()
		pinned, kept := b.Breaker("pinned"), b.Breaker("kept")
		for _, name := range []string{pinned, kept} {
			if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
				t.Fatal(err)
			}
			f.hear(name)
		}
		if got, err := f.st.FindLost(ctx); err != nil || len(got) != 0 {
			t.Fatalf("FindLost before any loss = %+v, %v; want none", got, err)
		}
		f.forget(pinned)
		got, err := f.st.FindLost(ctx)
		if err != nil || len(got) != 1 || got[0].Breaker != pinned || !got[0].Pinned() || got[0].Known.ForceReason != "vendor maintenance" || got[0].Known.ForceBy != "alice" {
			t.Fatalf("FindLost = %+v, %v; want %q's pin (alice: vendor maintenance)", got, err, pinned)
		}
		if a := f.allow(pinned, "w1"); a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Errorf("Allow(%q) with the pin lost = %v, want DENIED_FORCED_OPEN from memory", pinned, a.Decision)
		}
		if n := len(lost.all()); n != 1 {
			t.Errorf("OnLost called %d times, want 1 (found once)", n)
		}
	})
}

// TestKeepingOf reads what INFO says about eviction and persistence.
func TestKeepingOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		info      string
		risk, aof bool
	}{
		{"# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:volatile-lru\r\n# Persistence\r\naof_enabled:0\r\n", false, false},
		{"maxmemory:1073741824\r\nmaxmemory_policy:volatile-lru\r\naof_enabled:1\r\n", true, true},
		{"maxmemory:1073741824\r\nmaxmemory_policy:allkeys-lfu\r\n", true, false},
		{"maxmemory:1073741824\r\nmaxmemory_policy:noeviction\r\n", false, false},
		{"# Clients\r\nconnected_clients:1\r\n", false, false}, // the embedded Redis tells nothing
	} {
		k := store.KeepingOf(c.info)
		if k.EvictionRisk() != c.risk || k.AOF != c.aof {
			t.Errorf("KeepingOf(%q) = %+v: risk %v, aof %v; want %v, %v", c.info, k, k.EvictionRisk(), k.AOF, c.risk, c.aof)
		}
	}
}

// TestKeepings reads INFO from the Redis (each master of a Cluster): the
// real servers tell their policy; the embedded one tells nothing.
func TestKeepings(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ks, err := f.st.Keepings(context.Background())
		if err != nil || len(ks) == 0 {
			t.Fatalf("Keepings = %+v, %v", ks, err)
		}
		for _, k := range ks {
			if k.Told != (b.Name != "miniredis") || k.Told && (k.Policy == "" || k.RunID == "") {
				t.Errorf("%s: Keeping = %+v", b.Name, k)
			}
		}
	})
}

// afterScript runs fn once, right after the first script call naming key
// has its reply: an event heard while that reply was on its way.
type afterScript struct {
	key  string
	once sync.Once
	fn   func()
}

func (h *afterScript) DialHook(next redis.DialHook) redis.DialHook { return next }

// isKey reports whether a command's argument a is h.key, given as a
// string or, as the coalescer gives its keys, a pointer to one.
func (h *afterScript) isKey(a any) bool {
	if p, ok := a.(*string); ok {
		return *p == h.key
	}
	return a == any(h.key)
}

func (h *afterScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *afterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && slices.ContainsFunc(cmd.Args(), h.isKey) {
			h.once.Do(h.fn)
		}
		return err
	}
}

// TestStateHeardDuringTheCallIsNoLoss: a transition made after Redis ran
// an Allow, whose event the daemon hears before that Allow's reply, is
// newer than Redis's answer: the answer stands and no loss is reported.
// The same state heard before an Allow that Redis answers behind it is a
// loss: denied from memory and reported once.
func TestStateHeardDuringTheCallIsNoLoss(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		var lost losses
		name := b.Breaker("heard-in-flight")
		rdb := b.NewClient(t)
		now, err := rdb.Time(ctx).Result() // the fleet's clock: miniredis's, or the one pinned
		if c := b.Clock(); c != nil {
			now = c()
		}
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		opened := &pb.Event{Breaker: name, Kind: pb.EventKind_EVENT_KIND_TRANSITION, Generation: 1,
			From: pb.State_STATE_CLOSED, To: pb.State_STATE_OPEN, AtMs: now.UnixMilli(), CooldownMs: 30_000}
		var st *store.Store
		rdb.AddHook(&afterScript{key: store.KeysOf(name).State, fn: func() { st.ObserveEvent(opened) }})
		st = store.New(rdb, store.Options{Now: b.Clock(), Rand: func() float64 { return 0 }, Channel: b.Prefix + "events", OnLost: lost.add})
		defer st.Close()
		if err := st.Load(ctx); err != nil {
			t.Fatalf("Load: %v", err)
		}
		got, err := st.Allow(ctx, name, "w1")
		if err != nil || got.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow(%q) with the trip heard while it was in flight = %v (%q), %v; want ALLOWED: Redis ran it before the trip",
				name, got.GetDecision(), got.GetReason(), err)
		}
		if l := lost.all(); len(l) != 0 {
			t.Fatalf("OnLost saw %+v for a state heard while the call was in flight, want nothing", l)
		}
		got, err = st.Allow(ctx, name, "w1")
		if err != nil || got.Decision != pb.Decision_DECISION_DENIED_OPEN || !strings.Contains(got.Reason, "lost this breaker's state") {
			t.Fatalf("Allow(%q) with generation 1 heard before it and Redis at 0 = %v (%q), %v; want DENIED_OPEN from memory",
				name, got.GetDecision(), got.GetReason(), err)
		}
		if l := lost.all(); len(l) != 1 || l[0].Known.Gen != 1 || l[0].Gen != 0 {
			t.Fatalf("OnLost saw %+v, want generation 1 lost once (Redis at 0)", l)
		}
	})
}
