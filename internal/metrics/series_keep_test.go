package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/breakerd/breakerd/internal/metrics"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecurityMadeUpBreakersCannotCrowdOutRealOnes (N6): two ordinary
// workers open DefaultMaxBreakerSeries breakers named to sort first
// ("!flood-…", now, two workers each). Past the cap the breakers that keep
// their series are chosen by what workers cannot make up, so each real
// open breaker keeps its series: one the policy declares, one whose
// outage began before the flood, and one that more distinct workers
// failed on. The flood's excess is counted as dropped.
func TestSecurityMadeUpBreakersCannotCrowdOutRealOnes(t *testing.T) {
	f := &fleet{}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Circuits: f.list,
		CooldownCap: func(string) time.Duration { return 15 * time.Minute },
		Declared:    func(name string) bool { return name == "stripe:charges" }})
	if err != nil {
		t.Fatal(err)
	}
	const now = 1_700_000_000_000
	open := func(name string, workers, openedAt int64) *pb.BreakerState {
		return &pb.BreakerState{Breaker: name, State: pb.State_STATE_OPEN, DistinctWorkers: workers, OpenedAtMs: openedAt, AsOfMs: now}
	}
	real := []*pb.BreakerState{
		open("stripe:charges", 2, now),       // declared by the policy
		open("web_search", 2, now-3_600_000), // open for an hour before the flood
		open("vendor:geo", 7, now),           // seven workers failed on it
	}
	states := append([]*pb.BreakerState{}, real...)
	for i := range metrics.DefaultMaxBreakerSeries {
		states = append(states, open(fmt.Sprintf("!flood-%03d", i), 2, now))
	}
	f.set(states...)
	if err := m.RefreshCircuits(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := series(t, reg, "breakerd_breaker_series_dropped", "breakerd_breaker_state")
	for _, st := range real {
		if want := fmt.Sprintf("breakerd_breaker_state{breaker=%s,state=open} 1", st.GetBreaker()); !contains(got, want) {
			t.Errorf("%s lost its series to the flood: no %s", st.GetBreaker(), want)
		}
	}
	if !contains(got, "breakerd_breaker_series_dropped{} 3") {
		t.Errorf("dropped: want 3 of the flood, got %v", got[:1])
	}
}
