package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestNamesPassPromlintAndRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, metrics.Options{Circuits: func(context.Context) ([]*pb.BreakerState, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Another part of the daemon registers on the same registry; a second
	// breakerd set on it is refused, not a panic.
	if _, err := metrics.New(reg, metrics.Options{}); err == nil {
		t.Error("registering breakerd's metrics twice on one registry succeeded")
	}
}

func TestCircuitsAreListedAtMostOncePerTTL(t *testing.T) {
	var lists atomic.Int64
	var fail atomic.Bool
	now := time.Unix(1000, 0)
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg, metrics.Options{
		CircuitsTTL: 10 * time.Second,
		Now:         func() time.Time { return now },
		Circuits: func(context.Context) ([]*pb.BreakerState, error) {
			lists.Add(1)
			if fail.Load() {
				return nil, errors.New("redis down")
			}
			return []*pb.BreakerState{
				{State: pb.State_STATE_OPEN}, {State: pb.State_STATE_OPEN}, {State: pb.State_STATE_HALF_OPEN},
				{State: pb.State_STATE_FORCED_OPEN}, {State: pb.State_STATE_FORCED_CLOSED}, {State: pb.State_STATE_CLOSED},
			}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP breakerd_open_circuits Breakers fleet-wide that deny calls: open, half_open and forced_open. Every replica reports the same fleet: aggregate with max, not sum.
# TYPE breakerd_open_circuits gauge
breakerd_open_circuits 4
`
	for range 3 {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_open_circuits"); err != nil {
			t.Fatal(err)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("3 scrapes within the TTL listed %d times, want 1", n)
	}
	if n, err := testutil.GatherAndCount(reg, "breakerd_circuits"); err != nil || n != 5 {
		t.Errorf("breakerd_circuits has %d series (%v), want 5 (open, half_open, forced_open, forced_closed, paused)", n, err)
	}

	now = now.Add(10 * time.Second)
	fail.Store(true)
	if n, err := testutil.GatherAndCount(reg, "breakerd_open_circuits"); err != nil || n != 0 {
		t.Errorf("after a failed List: breakerd_open_circuits has %d series (%v), want it absent, not stale", n, err)
	}
	if n, _ := testutil.GatherAndCount(reg, "breakerd_circuits_list_errors_total"); n != 1 {
		t.Errorf("no breakerd_circuits_list_errors_total series")
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("lists = %d, want 2 (the failure is cached for the TTL too)", n)
	}
}

func TestScriptLatencyIsNamedEvenOnTheEvalFallback(t *testing.T) {
	b := testredis.Mini(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.Client.AddHook(m.RedisHook())
	st := store.New(b.Client, store.Options{})
	ctx := context.Background()
	if _, err := st.Allow(ctx, "x", "w1"); err != nil { // NOSCRIPT, then EVAL
		t.Fatal(err)
	}
	if _, err := st.Allow(ctx, "x", "w1"); err != nil { // EVAL loaded it: EVALSHA
		t.Fatal(err)
	}
	if _, err := st.BatchGet(ctx, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	// allow: EVALSHA miss, EVAL, EVALSHA. read: one pipeline of EVALSHA
	// (NOSCRIPT), then one of EVAL.
	want := map[string]uint64{"allow": 3, "read": 2}
	for script, n := range want {
		if got := histCount(t, reg, script); got != n {
			t.Errorf("redis_script_duration_seconds_count{script=%q} = %d, want %d", script, got, n)
		}
	}
}

func histCount(t *testing.T, g prometheus.Gatherer, script string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "breakerd_redis_script_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "script" && l.GetValue() == script {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestBuildInfoNamesTheBuild(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	bi := buildinfo.Get()
	want := fmt.Sprintf(`# HELP breakerd_build_info Always 1; the labels say which build of breakerd this daemon runs (version, commit, Go version).
# TYPE breakerd_build_info gauge
breakerd_build_info{commit=%q,goversion=%q,version=%q} 1
`, bi.Commit, bi.GoVersion, bi.Version)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_build_info"); err != nil {
		t.Error(err)
	}
}
