package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/recovery"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestDaemonRunsRecoveryChecks: the real assembly (Run) with a policy
// that names a recovery check: a breaker that opens with a 1-hour
// cooldown is half-opened by the check of a vendor that answers 200, the
// next Allow is the probe, and the check is counted in the metrics. Time
// is the wall clock here (a 200ms interval), waited on as a condition.
func TestDaemonRunsRecoveryChecks(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		var hits atomic.Int64
		vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		t.Cleanup(vendor.Close) // after the daemon stops
		path := filepath.Join(t.TempDir(), "policy.yaml")
		writeFile(t, path, fmt.Sprintf(`breakers:
  - match: "%s*"
    threshold: 1
    min_workers: 1
    cooldown_base: 1h
    cooldown_cap: 2h
    recovery_check_interval: 200ms
    recovery_check:
      http: {url: "%s/status"}
      timeout: 150ms
`, b.Prefix, vendor.URL))
		u, cluster := b.URL()
		metrics := testredis.FreeAddr(t)
		c := Config{Listen: "127.0.0.1:0", RedisURL: u, RedisCluster: cluster, MetricsListen: metrics, CircuitsInterval: time.Second,
			EventsMaxLen: 1000, EventRetention: time.Hour, ShutdownTimeout: time.Second, HealthInterval: daemontest.HealthInterval,
			LogFormat: "json", PolicyFile: path}
		logs := &daemontest.Buffer{}
		addr := startRun(t, c, NewLogger(c, logs), logs)
		ctx := context.Background()
		cl, err := client.Dial(addr, client.WithWorkerID("w1"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		name := b.Breaker("search")
		a, err := cl.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := cl.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR})
		if err != nil || r.State.GetState() != pb.State_STATE_OPEN {
			t.Fatalf("trip: %v %v", r, err)
		}
		daemontest.Eventually(t, "the recovery check half-opens the breaker", func() bool {
			// miniredis's clock moves only when the test moves it: a lease
			// whose check failed (a timeout on a busy machine) must lapse.
			b.Advance(50 * time.Millisecond)
			st, err := cl.API().Get(ctx, &pb.GetRequest{Breaker: name})
			return err == nil && st.GetState().GetState() == pb.State_STATE_HALF_OPEN
		})
		if hits.Load() == 0 {
			t.Fatal("the breaker half-opened without a check reaching the vendor")
		}
		a, err = cl.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
		if err != nil || a.GetDecision() != pb.Decision_DECISION_PROBE {
			t.Fatalf("next Allow = %v %v, want PROBE", a.GetDecision(), err)
		}
		// At least one: on a busy host a check can succeed and its
		// half-open miss its timeout, and the next check count again.
		eventually(t, metrics, `breakerd_recovery_checks_total{result="success"}`, 1, true)
	})
}

// TestRecoveryChecksListOnceTheHubIsLive: the checker's List of open
// breakers waits for the hub's subscription, so a breaker that opens
// while the daemon starts (after an early List, before the subscription)
// is not missed; on a busy machine one was, and went unchecked for its
// whole cooldown.
func TestRecoveryChecksListOnceTheHubIsLive(t *testing.T) {
	b := testredis.Mini(t)
	p := policy.Default()
	p.Threshold, p.MinWorkers = 1, 1
	st := store.New(b.Client, store.Options{Policies: policy.NewSet(p)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trip := func(name string) {
		t.Helper()
		a, err := st.Allow(ctx, name, "w1")
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT})
		if err != nil || r.GetState().GetState() != pb.State_STATE_OPEN {
			t.Fatalf("trip %s: %v %v", name, r, err)
		}
	}
	ck, err := recovery.New(recovery.Options{Store: st, ID: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	trip(b.Breaker("before"))
	live := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runRecoveryChecks(ctx, live, ck, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	trip(b.Breaker("while-starting")) // no hub here: only the List can see it
	close(live)
	daemontest.Eventually(t, "both open breakers seeded", func() bool { return ck.Open() == 2 })
	cancel()
	<-done
}
