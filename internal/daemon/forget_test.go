package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// healthOf is what the health service answers for the daemon.
func healthOf(t *testing.T, hs *health.Server) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	res, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetStatus()
}

// TestHealthTellsOneStory: a daemon started while Redis is down and one
// that loses Redis later report the same health, by --redis-outage:
// SERVING with memory (it answers, degraded), NOT_SERVING with
// unavailable; both report SERVING once Redis answers. The checks are
// triggered directly.
func TestHealthTellsOneStory(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, inMemory := range []bool{true, false} {
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if inMemory {
			want = healthpb.HealthCheckResponse_SERVING
		}
		m := miniredis.RunT(t)
		checker := func(addr string) (func(), *health.Server) {
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			st := store.New(rdb, store.Options{})
			t.Cleanup(st.Close)
			hs := health.NewServer()
			server.SetServing(hs, false)
			// every bounds one check (loading the scripts into an empty
			// Redis): wide, since the checks here are triggered directly
			// and a busy machine's slow load is not the outage tested.
			return healthChecker(context.Background(), healthDeps{st: st, hs: hs, every: time.Minute, log: log,
				degraded: func(bool) {}, inMemory: inMemory, redisBack: func(context.Context) {}}), hs
		}
		checkStart, atStart := checker(testredis.FreeAddr(t)) // nothing listens there
		checkLater, later := checker(m.Addr())
		checkStart()
		checkLater()
		if got := healthOf(t, atStart); got != want {
			t.Errorf("memory=%v: started while Redis is down: health %v, want %v", inMemory, got, want)
		}
		if got := healthOf(t, later); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("memory=%v: started with Redis up: health %v, want SERVING", inMemory, got)
		}
		testredis.Stop(m)
		checkLater()
		if got := healthOf(t, later); got != want {
			t.Errorf("memory=%v: Redis lost after start: health %v, want %v (as at start)", inMemory, got, want)
		}
	}
}

// gathered returns the value of the metric name on reg (0 when absent).
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// newTestKeeper returns a keeper on st with metrics of its own, running
// until t ends, and its registry and log.
func newTestKeeper(t *testing.T, o store.Options, rdb redis.UniversalClient) (*keeper, *store.Store, *prometheus.Registry, *daemontest.Buffer) {
	t.Helper()
	logs := &daemontest.Buffer{}
	k := newKeeper(slog.New(slog.NewTextHandler(logs, nil)), "breakerd@test")
	o.OnLost = k.onLost
	st := store.New(rdb, o)
	t.Cleanup(st.Close)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k.st, k.m = st, m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return k, st, reg, logs
}

// pinAndTrip has st pin pinned open (by alice, for "vendor maintenance")
// and open open by 5 timeouts from two workers, then observe both
// breakers' events as the hub does: what the daemon remembers of them
// when Redis forgets.
func pinAndTrip(t *testing.T, st *store.Store, pinned, open string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Force(ctx, pinned, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		w := []string{"w1", "w2"}[i%2]
		a, err := st.Allow(ctx, open, w)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Record(ctx, &pb.RecordRequest{Breaker: open, WorkerId: w, Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{pinned, open} {
		evs, err := st.Events(ctx, store.EventQuery{Breaker: name})
		if err != nil || len(evs) == 0 {
			t.Fatalf("Events(%q) = %d, %v", name, len(evs), err)
		}
		for _, e := range evs {
			st.ObserveEvent(e) // as the hub does
		}
	}
}

// TestKeeperPutsLostPinBack: Redis forgets a pin and an open breaker; the
// check the health check runs when Redis comes back finds both, counts
// and logs them, raises one state_lost alert each, and puts the pin back
// with its operator and reason, while the open breaker stays denied.
func TestKeeperPutsLostPinBack(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		k, st, reg, logs := newTestKeeper(t, store.Options{Now: b.Clock(), Channel: b.Prefix + "events"}, b.Client)
		ctx := context.Background()
		pinned, open := b.Breaker("pinned"), b.Breaker("open")
		pinAndTrip(t, st, pinned, open)
		for _, name := range []string{pinned, open} {
			ks := store.KeysOf(name)
			if err := b.Client.Del(ctx, ks.State, ks.Workers, ks.Events, ks.RL, ks.Pause, ks.Window).Err(); err != nil {
				t.Fatal(err)
			}
		}

		k.check(ctx)
		if got := gathered(t, reg, "breakerd_redis_state_lost_total"); got != 2 {
			t.Errorf("breakerd_redis_state_lost_total = %v, want 2", got)
		}
		daemontest.Eventually(t, "the pin is back and both alerts are raised", func() bool {
			s, err := st.Get(ctx, pinned)
			if err != nil || s.GetState() != pb.State_STATE_FORCED_OPEN || s.GetForcedBy() != "alice" || !strings.HasPrefix(s.GetReason(), "vendor maintenance") {
				return false
			}
			for _, name := range []string{pinned, open} {
				evs, err := st.Events(ctx, store.EventQuery{Breaker: name})
				if err != nil || len(evs) == 0 || evs[0].GetKind() != pb.EventKind_EVENT_KIND_STATE_LOST {
					return false
				}
			}
			return true
		})
		if a, err := st.Allow(ctx, open, "w3"); err != nil || a.GetDecision() != pb.Decision_DECISION_DENIED_OPEN {
			t.Errorf("Allow(%q) after the loss = %v, %v; want DENIED_OPEN", open, a.GetDecision(), err)
		}
		if n := strings.Count(logs.String(), "redis lost a breaker's state"); n != 2 {
			t.Errorf("%d log lines about lost states, want 2:\n%s", n, logs.String())
		}
	})
}

// redisServer runs a redis-server of its own on a free port (the real
// tier only: it changes its configuration and restarts it). restart kills
// it (SIGKILL) and starts it again on the same port, empty: no
// persistence.
func redisServer(t *testing.T, args ...string) (addr string, restart func()) {
	t.Helper()
	if os.Getenv("BREAKERD_TEST_REDIS_ADDR") == "" {
		t.Skip("BREAKERD_TEST_REDIS_ADDR unset: no real Redis tier")
	}
	addr = testredis.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command("redis-server", append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("redis-server: %v", err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		daemontest.Eventually(t, "redis-server answers", func() bool { return rdb.Ping(context.Background()).Err() == nil })
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	start()
	t.Cleanup(stop)
	return addr, func() { stop(); start() }
}

// TestKeeperSeesEvictionRisk: a Redis with a memory limit and
// volatile-lru sets breakerd_redis_eviction_risk and says so in the log;
// with noeviction the gauge goes back to 0.
func TestKeeperSeesEvictionRisk(t *testing.T) {
	addr, _ := redisServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	k, _, reg, logs := newTestKeeper(t, store.Options{}, rdb)
	k.check(ctx)
	if got := gathered(t, reg, "breakerd_redis_eviction_risk"); got != 1 {
		t.Errorf("breakerd_redis_eviction_risk with volatile-lru = %v, want 1", got)
	}
	for _, want := range []string{"may evict breakerd's keys", "maxmemory_policy=volatile-lru", "has no AOF"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	k.check(ctx)
	if got := gathered(t, reg, "breakerd_redis_eviction_risk"); got != 0 {
		t.Errorf("breakerd_redis_eviction_risk with noeviction = %v, want 0", got)
	}
}

// TestRestartWithoutPersistence: Redis restarts empty under a daemon that
// heard a breaker open and another pinned. The health check (triggered
// directly) sees Redis come back, logs the restart, finds both lost,
// raises their alerts and puts the pin back; the open breaker is denied
// until its probe time rather than answered CLOSED.
func TestRestartWithoutPersistence(t *testing.T) {
	addr, restart := redisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	k, st, reg, logs := newTestKeeper(t, store.Options{}, rdb)
	hs := health.NewServer()
	check := healthChecker(ctx, healthDeps{st: st, hs: hs, every: 5 * time.Second, log: k.log,
		degraded: func(bool) {}, inMemory: true, redisBack: k.check})
	check()
	open, pinned := "restart/open", "restart/pinned"
	pinAndTrip(t, st, pinned, open)

	restart()
	daemontest.Eventually(t, "the health check finds both states lost", func() bool {
		check()
		return gathered(t, reg, "breakerd_redis_state_lost_total") == 2
	})
	daemontest.Eventually(t, "the pin is back", func() bool {
		s, err := st.Get(ctx, pinned)
		return err == nil && s.GetState() == pb.State_STATE_FORCED_OPEN && s.GetForcedBy() == "alice"
	})
	a, err := st.Allow(ctx, open, "w3")
	if err != nil || a.GetDecision() != pb.Decision_DECISION_DENIED_OPEN || a.GetRetryAfterMs() <= 0 {
		t.Errorf("Allow(%q) after the restart = %v (retry %d ms), %v; want DENIED_OPEN until its probe time", open, a.GetDecision(), a.GetRetryAfterMs(), err)
	}
	var evs []*pb.Event
	daemontest.Eventually(t, "the state_lost alert in the open breaker's log", func() bool {
		evs, err = st.Events(ctx, store.EventQuery{Breaker: open})
		return err == nil && len(evs) > 0
	})
	if len(evs) != 1 || evs[0].GetKind() != pb.EventKind_EVENT_KIND_STATE_LOST {
		t.Errorf("%q's log after the restart = %v; want one state_lost alert", open, evs)
	}
	for _, want := range []string{"redis lacked scripts", "redis restarted (its run_id changed)", "redis lost a breaker's state"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}
